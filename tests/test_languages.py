"""Entities, contains edges, imports and bases for the languages beyond Python/JS/TS.

Real tree-sitter grammars; each sample is small, realistic code with the exact
entities cogd should index from it. Imports and bases are checked on the
language's own queries (``grammar(lang).imports`` / ``.inherits``), which
:mod:`cogd.index.references` turns into edges.
"""

from __future__ import annotations

import textwrap

import pytest
import tree_sitter

from cogd.index.extract import extract
from cogd.index.languages import LANGUAGES, _tags_source, grammar, language_for_path


def src(text: str) -> bytes:
    return textwrap.dedent(text).lstrip("\n").encode("utf-8")


def check_entities(parsed, expected: list[tuple]) -> None:
    """``expected``: (id, kind, subkind, start, end, parent) per entity, the file first."""
    got = [(e.id, e.kind, e.subkind, e.start_line, e.end_line) for e in parsed.entities]
    assert got == [row[:5] for row in expected]
    contains = [(x.src, x.dst) for x in parsed.edges if x.kind == "contains"]
    assert contains == [(row[5], row[0]) for row in expected[1:]]


def by_id(parsed) -> dict:
    return {e.id: e for e in parsed.entities}


def matches(language: str, which: str, code: bytes) -> list[dict]:
    """Each match of the language's imports/inherits query: capture → text (helpers and @import left out)."""
    gram = grammar(language)
    tree = gram.parser.parse(code)
    query = getattr(gram, which)
    return [
        {name: nodes[0].text.decode() for name, nodes in captures.items() if not name.startswith("_") and name != "import"}
        for _pattern, captures in tree_sitter.QueryCursor(query).matches(tree.root_node)
    ]


# --------------------------------------------------------------------------- registry

@pytest.mark.parametrize("path, expected", [
    ("cmd/main.go", "go"), ("src/lib.rs", "rust"), ("A.java", "java"),
    ("q.c", "c"), ("q.h", "c"),
    ("a.cpp", "cpp"), ("a.cc", "cpp"), ("a.cxx", "cpp"), ("a.hpp", "cpp"), ("a.hh", "cpp"), ("a.hxx", "cpp"),
    ("Program.cs", "csharp"), ("app/models/user.rb", "ruby"), ("index.php", "php"),
    ("Main.kt", "kotlin"), ("build.gradle.kts", "kotlin"), ("deploy.sh", "bash"), ("env.bash", "bash"),
    ("notes.csv", None), ("x.c.orig", None),
])
def test_extensions(path, expected):
    assert language_for_path(path) == expected


def test_every_new_language_loads_with_imports():
    for name in ("go", "rust", "java", "c", "cpp", "csharp", "ruby", "php", "kotlin", "bash"):
        gram = grammar(name)
        assert gram.tags.pattern_count > 0, name
        assert gram.imports is not None, name
    # tree-sitter-c-sharp ships its tags.scm in a sibling `tree_sitter_c-sharp/queries` folder.
    assert "(class_declaration name: (identifier) @name) @definition.class" in _tags_source("tree_sitter_c_sharp")
    # Kotlin and Bash ship none: their definitions are cogd's own patterns.
    assert LANGUAGES["kotlin"].tags_from == () and LANGUAGES["bash"].tags_from == ()
    assert {n for n in LANGUAGES if grammar(n).inherits is None} == {"c", "bash"}


# --------------------------------------------------------------------------- Go

GO = src(r'''
    // Package inventory tracks stock levels.
    package inventory

    import (
        "errors"
        "fmt"
        str "strings"
    )

    // ErrEmpty is returned when nothing is left.
    var ErrEmpty = errors.New("empty")

    // Threshold below which a reorder is due.
    const Threshold = 5

    const (
        // Unit is the smallest countable amount.
        Unit  = 1
        batch = 12
    )

    // SKU identifies a product.
    type SKU string

    // Item is one stock line.
    type Item struct {
        fmt.Stringer
        SKU   SKU
        Count int
    }

    type Counter interface {
        Count() int
    }

    // Restock adds a batch.
    func (it *Item) Restock() {
        it.Count += batch
    }

    func (s SKU) Upper() string { return str.ToUpper(string(s)) }

    func Low(items []Item) []Item {
        keep := func(i Item) bool { return i.Count < Threshold }
        var out []Item
        for _, i := range items {
            if keep(i) {
                out = append(out, i)
            }
        }
        return out
    }
''')


def test_go_entities():
    parsed = extract("inventory.go", GO, "go")
    check_entities(parsed, [
        ("inventory.go", "file", "", 1, 52, None),
        ("inventory.go::inventory", "module", "package", 2, 2, "inventory.go"),
        ("inventory.go::Threshold", "constant", "", 14, 14, "inventory.go"),
        ("inventory.go::Unit", "constant", "", 18, 18, "inventory.go"),
        ("inventory.go::SKU", "class", "type", 23, 23, "inventory.go"),
        ("inventory.go::Item", "class", "struct", 26, 30, "inventory.go"),
        ("inventory.go::Counter", "class", "interface", 32, 34, "inventory.go"),
        ("inventory.go::Item.Restock", "method", "", 37, 39, "inventory.go::Item"),
        ("inventory.go::SKU.Upper", "method", "", 41, 41, "inventory.go::SKU"),
        ("inventory.go::Low", "function", "", 43, 52, "inventory.go"),
    ])
    e = by_id(parsed)
    assert e["inventory.go::inventory"].doc == "Package inventory tracks stock levels."
    assert e["inventory.go::Threshold"].doc == "Threshold below which a reorder is due."
    assert e["inventory.go::Unit"].doc == "Unit is the smallest countable amount."  # documented inside the group
    assert e["inventory.go::Item.Restock"].signature == "func (it *Item) Restock()"
    assert e["inventory.go::Item.Restock"].doc == "Restock adds a batch."
    assert e["inventory.go::Item"].body.endswith("Restock")  # methods are members of their receiver type


def test_go_imports_and_embedded_types():
    assert matches("go", "imports", GO) == [
        {"module": "errors"}, {"module": "fmt"},
        {"module": "strings"}, {"module": "strings", "alias": "str"},
    ]
    assert matches("go", "inherits", GO) == [{"base": "fmt.Stringer"}]


# --------------------------------------------------------------------------- Rust

RUST = src(r'''
    //! Temperature sensors.

    use std::collections::HashMap;
    use std::fmt::{self, Display};
    use crate::units::Celsius as C;
    mod calibration;

    /// Readings kept per sensor.
    pub const HISTORY: usize = 16;

    static mut DEBUG: bool = false;

    /// Something that reports a temperature.
    pub trait Sensor: Send {
        fn read(&self) -> C;
        fn label(&self) -> String {
            String::from("sensor")
        }
    }

    /// A probe on the bus.
    #[derive(Debug, Clone)]
    pub struct Probe {
        id: u32,
    }

    pub enum Status { Ok, Faulty(String) }

    impl Probe {
        pub fn new(id: u32) -> Self {
            Probe { id }
        }
    }

    impl Sensor for Probe {
        fn read(&self) -> C {
            C(20.0)
        }
    }

    impl Display for Status {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "status")
        }
    }

    pub mod registry {
        pub fn all() -> HashMap<u32, String> {
            HashMap::new()
        }
    }
''')


def test_rust_entities():
    parsed = extract("src/sensors.rs", RUST, "rust")
    check_entities(parsed, [
        ("src/sensors.rs", "file", "", 1, 51, None),
        ("src/sensors.rs::HISTORY", "constant", "", 9, 9, "src/sensors.rs"),
        ("src/sensors.rs::Sensor", "class", "trait", 14, 19, "src/sensors.rs"),
        ("src/sensors.rs::Sensor.read", "method", "", 15, 15, "src/sensors.rs::Sensor"),
        ("src/sensors.rs::Sensor.label", "method", "", 16, 18, "src/sensors.rs::Sensor"),
        ("src/sensors.rs::Probe", "class", "struct", 22, 25, "src/sensors.rs"),
        ("src/sensors.rs::Status", "class", "enum", 27, 27, "src/sensors.rs"),
        ("src/sensors.rs::Probe.new", "method", "", 30, 32, "src/sensors.rs::Probe"),
        ("src/sensors.rs::Probe.read", "method", "", 36, 38, "src/sensors.rs::Probe"),
        ("src/sensors.rs::Status.fmt", "method", "", 42, 44, "src/sensors.rs::Status"),
        ("src/sensors.rs::registry", "module", "", 47, 51, "src/sensors.rs"),
        ("src/sensors.rs::registry.all", "function", "", 48, 50, "src/sensors.rs::registry"),
    ])
    e = by_id(parsed)
    assert e["src/sensors.rs"].doc == "Temperature sensors."  # `//!` is the crate/module doc
    assert e["src/sensors.rs::HISTORY"].doc == "Readings kept per sensor."
    # The attribute belongs to the struct: the span starts at it, the doc comment is above it.
    assert e["src/sensors.rs::Probe"].doc == "A probe on the bus."
    assert e["src/sensors.rs::Probe"].signature == "pub struct Probe"


def test_rust_imports_and_impl_traits():
    assert matches("rust", "imports", RUST) == [
        {"module": "std::collections", "name": "HashMap"},
        {"module": "std::fmt", "name": "Display"},
        {"module": "crate::units", "name": "Celsius", "alias": "C"},
        {"module": "calibration"},  # `mod calibration;` loads another file
    ]
    assert matches("rust", "inherits", RUST) == [
        {"base": "Send"},
        {"base": "Sensor", "type": "Probe"},  # impl Sensor for Probe
        {"base": "Display", "type": "Status"},
    ]


# --------------------------------------------------------------------------- Java

JAVA = src(r'''
    package org.acme.billing;

    import java.util.ArrayList;
    import java.util.List;
    import java.time.*;

    /** Something with an amount. */
    public interface Billable extends Comparable<Billable> {
        long cents();
    }

    /**
     * An invoice with lines.
     */
    public class Invoice extends Document implements Billable, java.io.Serializable {
        private final List<Line> lines = new ArrayList<>();

        public Invoice(String number) {
            super(number);
        }

        @Override
        public long cents() {
            return lines.stream().mapToLong(Line::cents).sum();
        }

        public int compareTo(Billable other) {
            return Long.compare(cents(), other.cents());
        }

        /** One line of an invoice. */
        static final class Line {
            long cents() { return 0; }
        }

        enum Status { DRAFT, SENT }
    }

    record Total(long cents) {}
''')


def test_java_entities():
    parsed = extract("Invoice.java", JAVA, "java")
    check_entities(parsed, [
        ("Invoice.java", "file", "", 1, 39, None),
        ("Invoice.java::org.acme.billing", "module", "package", 1, 1, "Invoice.java"),
        ("Invoice.java::Billable", "class", "interface", 8, 10, "Invoice.java"),
        ("Invoice.java::Billable.cents", "method", "", 9, 9, "Invoice.java::Billable"),
        ("Invoice.java::Invoice", "class", "", 15, 37, "Invoice.java"),
        ("Invoice.java::Invoice.cents", "method", "", 22, 25, "Invoice.java::Invoice"),
        ("Invoice.java::Invoice.compareTo", "method", "", 27, 29, "Invoice.java::Invoice"),
        ("Invoice.java::Invoice.Line", "class", "", 32, 34, "Invoice.java::Invoice"),
        ("Invoice.java::Invoice.Line.cents", "method", "", 33, 33, "Invoice.java::Invoice.Line"),
        ("Invoice.java::Invoice.Status", "class", "enum", 36, 36, "Invoice.java::Invoice"),
        ("Invoice.java::Total", "class", "record", 39, 39, "Invoice.java"),
    ])
    e = by_id(parsed)
    assert e["Invoice.java::Invoice"].doc == "An invoice with lines."
    assert e["Invoice.java::Invoice.Line"].doc == "One line of an invoice."


def test_java_imports_and_bases():
    assert matches("java", "imports", JAVA) == [
        {"module": "java.util", "name": "ArrayList"},
        {"module": "java.util", "name": "List"},
        {"module": "java.time"},  # import java.time.*
    ]
    assert matches("java", "inherits", JAVA) == [
        {"base": "Comparable<Billable>"}, {"base": "Document"}, {"base": "Billable"}, {"base": "java.io.Serializable"},
    ]


# --------------------------------------------------------------------------- C

C = src(r'''
    /* Fixed-size byte queue. */

    #include <stddef.h>
    #include "queue.h"

    /* Bytes a queue can hold. */
    #define QUEUE_CAP 128

    #define UNUSED(x) (void)(x)

    struct queue {
        unsigned char buf[QUEUE_CAP];
        size_t head, tail;
    };

    typedef enum { QUEUE_OK, QUEUE_FULL } queue_status;

    typedef struct queue queue_t;

    union word {
        unsigned int u;
        unsigned char bytes[4];
    };

    static size_t next(size_t i);

    /* Append one byte; fails when full. */
    queue_status queue_push(struct queue *q, unsigned char c)
    {
        size_t n = next(q->tail);
        if (n == q->head)
            return QUEUE_FULL;
        q->buf[q->tail] = c;
        q->tail = n;
        return QUEUE_OK;
    }

    static size_t next(size_t i)
    {
        return (i + 1) % QUEUE_CAP;
    }

    struct queue *queue_new(void);
''')


def test_c_entities():
    parsed = extract("queue.c", C, "c")
    check_entities(parsed, [
        ("queue.c", "file", "", 1, 43, None),
        ("queue.c::QUEUE_CAP", "constant", "", 7, 7, "queue.c"),
        ("queue.c::queue", "class", "struct", 11, 14, "queue.c"),
        ("queue.c::queue_status", "class", "enum", 16, 16, "queue.c"),
        ("queue.c::queue_t", "class", "type", 18, 18, "queue.c"),
        ("queue.c::word", "class", "union", 20, 23, "queue.c"),
        # The prototype of `next` on line 25 yields to its definition; `queue_new` has none here.
        ("queue.c::queue_push", "function", "", 28, 36, "queue.c"),
        ("queue.c::next", "function", "", 38, 41, "queue.c"),
        ("queue.c::queue_new", "function", "", 43, 43, "queue.c"),
    ])
    e = by_id(parsed)
    assert e["queue.c"].doc == "Fixed-size byte queue."
    assert e["queue.c::queue_push"].signature == "queue_status queue_push(struct queue *q, unsigned char c)"
    assert e["queue.c::queue_push"].doc == "Append one byte; fails when full."
    assert e["queue.c::queue_new"].signature == "struct queue *queue_new(void);"


def test_c_includes():
    assert matches("c", "imports", C) == [{"module": "<stddef.h>"}, {"module": "queue.h"}]


def test_c_typedef_of_a_named_struct_is_one_entity():
    code = src(r'''
        /* A list node. */
        typedef struct node {
            struct node *next;
        } node_t;

        enum color paint;
        struct node *head;
    ''')
    parsed = extract("list.h", code, "c")
    check_entities(parsed, [
        ("list.h", "file", "", 1, 7, None),
        ("list.h::node", "class", "struct", 2, 4, "list.h"),
    ])
    assert by_id(parsed)["list.h::node"].doc == "A list node."


# --------------------------------------------------------------------------- C++

CPP = src(r'''
    #include <vector>
    #include "shape.h"

    namespace draw {

    /// Anything that can be drawn.
    class Drawable {
    public:
        virtual ~Drawable() = default;
        virtual void paint() const = 0;
    };

    template <typename T>
    class Layer : public Drawable, protected std::vector<T> {
    public:
        void paint() const override;
        std::size_t count() const { return this->size(); }
    };

    class Canvas {
        void clear();
    };

    struct Point { int x, y; };

    template <typename T>
    void Layer<T>::paint() const {
        for (auto &item : *this) item.paint();
    }

    }  // namespace draw

    enum class Mode { Fill, Stroke };

    int render(const draw::Drawable &d);

    void draw::Canvas::clear() {}
''')


def test_cpp_entities():
    parsed = extract("canvas.cpp", CPP, "cpp")
    check_entities(parsed, [
        ("canvas.cpp", "file", "", 1, 37, None),
        ("canvas.cpp::draw", "module", "", 4, 31, "canvas.cpp"),
        ("canvas.cpp::draw.Drawable", "class", "", 7, 11, "canvas.cpp::draw"),
        ("canvas.cpp::draw.Drawable.paint", "method", "", 10, 10, "canvas.cpp::draw.Drawable"),
        ("canvas.cpp::draw.Layer", "class", "", 13, 18, "canvas.cpp::draw"),
        ("canvas.cpp::draw.Layer.count", "method", "", 17, 17, "canvas.cpp::draw.Layer"),
        ("canvas.cpp::draw.Canvas", "class", "", 20, 22, "canvas.cpp::draw"),
        ("canvas.cpp::draw.Point", "class", "struct", 24, 24, "canvas.cpp::draw"),
        # Out-of-class definitions: named after their class, contained in it, replacing the in-class prototype.
        ("canvas.cpp::draw.Layer.paint", "method", "", 26, 29, "canvas.cpp::draw.Layer"),
        ("canvas.cpp::Mode", "class", "enum", 33, 33, "canvas.cpp"),
        ("canvas.cpp::render", "function", "", 35, 35, "canvas.cpp"),
        ("canvas.cpp::draw.Canvas.clear", "method", "", 37, 37, "canvas.cpp::draw.Canvas"),
    ])
    e = by_id(parsed)
    assert e["canvas.cpp::draw.Drawable"].doc == "Anything that can be drawn."
    assert e["canvas.cpp::draw.Layer.paint"].signature == "void Layer<T>::paint() const"


def test_cpp_includes_and_bases():
    assert matches("cpp", "imports", CPP) == [{"module": "<vector>"}, {"module": "shape.h"}]
    assert matches("cpp", "inherits", CPP) == [{"base": "Drawable"}, {"base": "std::vector<T>"}]


# --------------------------------------------------------------------------- C#

CSHARP = src(r'''
    using System;
    using System.Collections.Generic;
    using Json = System.Text.Json.JsonSerializer;

    namespace Acme.Orders
    {
        /// <summary>Anything with a price.</summary>
        public interface IPriced
        {
            decimal Price { get; }
            decimal Total();
        }

        public enum Status { Open, Paid }

        /// <summary>An order of several lines.</summary>
        public class Order : Entity, IPriced, IComparable<Order>
        {
            public const int MaxLines = 50;

            public Order(string id) { Id = id; }

            public decimal Price => Total();

            public decimal Total()
            {
                return 0m;
            }

            public int CompareTo(Order other) => Id.CompareTo(other.Id);

            private struct Line
            {
                public decimal Amount;
            }
        }

        public record Receipt(string Id, decimal Paid);
    }
''')


def test_csharp_entities():
    parsed = extract("Orders.cs", CSHARP, "csharp")
    check_entities(parsed, [
        ("Orders.cs", "file", "", 1, 39, None),
        ("Orders.cs::Acme.Orders", "module", "", 5, 39, "Orders.cs"),
        ("Orders.cs::Acme.Orders.IPriced", "class", "interface", 8, 12, "Orders.cs::Acme.Orders"),
        ("Orders.cs::Acme.Orders.IPriced.Total", "method", "", 11, 11, "Orders.cs::Acme.Orders.IPriced"),
        ("Orders.cs::Acme.Orders.Status", "class", "enum", 14, 14, "Orders.cs::Acme.Orders"),
        ("Orders.cs::Acme.Orders.Order", "class", "", 17, 36, "Orders.cs::Acme.Orders"),
        ("Orders.cs::Acme.Orders.Order.Total", "method", "", 25, 28, "Orders.cs::Acme.Orders.Order"),
        ("Orders.cs::Acme.Orders.Order.CompareTo", "method", "", 30, 30, "Orders.cs::Acme.Orders.Order"),
        ("Orders.cs::Acme.Orders.Order.Line", "class", "struct", 32, 35, "Orders.cs::Acme.Orders.Order"),
        ("Orders.cs::Acme.Orders.Receipt", "class", "record", 38, 38, "Orders.cs::Acme.Orders"),
    ])
    assert by_id(parsed)["Orders.cs::Acme.Orders.Order"].doc == "<summary>An order of several lines.</summary>"


def test_csharp_file_scoped_namespace_is_a_package():
    code = src(r'''
        namespace Acme.Tools;

        public static class Slug
        {
            public static string Make(string s) => s.ToLowerInvariant();
        }
    ''')
    check_entities(extract("Slug.cs", code, "csharp"), [
        ("Slug.cs", "file", "", 1, 6, None),
        ("Slug.cs::Acme.Tools", "module", "package", 1, 1, "Slug.cs"),
        ("Slug.cs::Slug", "class", "", 3, 6, "Slug.cs"),
        ("Slug.cs::Slug.Make", "method", "", 5, 5, "Slug.cs::Slug"),
    ])


def test_csharp_usings_and_bases():
    assert matches("csharp", "imports", CSHARP) == [
        {"module": "System"}, {"module": "System.Collections.Generic"},
        {"alias": "Json", "module": "System.Text.Json.JsonSerializer"},
    ]
    assert matches("csharp", "inherits", CSHARP) == [
        {"base": "Entity"}, {"base": "IPriced"}, {"base": "IComparable<Order>"},
    ]


# --------------------------------------------------------------------------- Ruby

RUBY = src(r'''
    # Shipping rules for the store.

    require "set"
    require_relative "zones"

    module Shipping
      # Flat fee in cents.
      BASE_FEE = 499

      FREE_ABOVE = 5_000

      # A parcel on its way.
      class Parcel < Carrier::Base
        include Comparable

        def fee
          BASE_FEE + weight * 10
        end

        def self.light(zone)
          new(1, zone)
        end
      end

      class Express < Parcel
        def fee = super * 2
      end

      def self.zones
        Set.new(%w[eu us])
      end
    end

    def ship(parcel)
      puts parcel.fee
    end
''')


def test_ruby_entities():
    parsed = extract("lib/shipping.rb", RUBY, "ruby")
    check_entities(parsed, [
        ("lib/shipping.rb", "file", "", 1, 36, None),
        ("lib/shipping.rb::Shipping", "module", "", 6, 32, "lib/shipping.rb"),
        ("lib/shipping.rb::Shipping.BASE_FEE", "constant", "", 8, 8, "lib/shipping.rb::Shipping"),
        ("lib/shipping.rb::Shipping.Parcel", "class", "", 13, 23, "lib/shipping.rb::Shipping"),
        ("lib/shipping.rb::Shipping.Parcel.fee", "method", "", 16, 18, "lib/shipping.rb::Shipping.Parcel"),
        ("lib/shipping.rb::Shipping.Parcel.light", "method", "", 20, 22, "lib/shipping.rb::Shipping.Parcel"),
        ("lib/shipping.rb::Shipping.Express", "class", "", 25, 27, "lib/shipping.rb::Shipping"),
        ("lib/shipping.rb::Shipping.Express.fee", "method", "", 26, 26, "lib/shipping.rb::Shipping.Express"),
        ("lib/shipping.rb::Shipping.zones", "function", "", 29, 31, "lib/shipping.rb::Shipping"),
        ("lib/shipping.rb::ship", "function", "", 34, 36, "lib/shipping.rb"),
    ])
    e = by_id(parsed)
    assert e["lib/shipping.rb"].doc == "Shipping rules for the store."
    assert e["lib/shipping.rb::Shipping.BASE_FEE"].doc == "Flat fee in cents."  # FREE_ABOVE has none: no entity
    assert e["lib/shipping.rb::Shipping.Parcel"].doc == "A parcel on its way."


def test_ruby_requires_superclasses_and_mixins():
    assert matches("ruby", "imports", RUBY) == [{"module": "set"}, {"module": "zones"}]
    assert matches("ruby", "inherits", RUBY) == [
        {"base": "Carrier::Base"}, {"base": "Comparable"}, {"base": "Parcel"},
    ]


# --------------------------------------------------------------------------- PHP

PHP = src(r'''
    <?php
    /**
     * Catalogue entities.
     */

    namespace Shop\Catalogue;

    use Shop\Contracts\Sellable;
    use Shop\Support\{Money, Str as S};

    require_once __DIR__ . '/bootstrap.php';

    /** Items shown per page. */
    const PAGE_SIZE = 20;

    interface Describable
    {
        public function describe(): string;
    }

    trait HasSlug
    {
        public function slug(): string
        {
            return S::slug($this->name);
        }
    }

    /** A product in the catalogue. */
    class Product extends Entity implements Sellable, Describable
    {
        use HasSlug;

        public function __construct(private string $name, private Money $price) {}

        public function describe(): string
        {
            return "{$this->name}: {$this->price}";
        }
    }

    enum Availability: string
    {
        case InStock = 'in';
        case Gone = 'out';
    }

    function cheapest(array $products): ?Product
    {
        return $products[0] ?? null;
    }
''')


def test_php_entities():
    parsed = extract("src/Catalogue.php", PHP, "php")
    check_entities(parsed, [
        ("src/Catalogue.php", "file", "", 1, 51, None),
        ("src/Catalogue.php::Shop\\Catalogue", "module", "package", 6, 6, "src/Catalogue.php"),
        ("src/Catalogue.php::PAGE_SIZE", "constant", "", 14, 14, "src/Catalogue.php"),
        ("src/Catalogue.php::Describable", "class", "interface", 16, 19, "src/Catalogue.php"),
        ("src/Catalogue.php::Describable.describe", "method", "", 18, 18, "src/Catalogue.php::Describable"),
        ("src/Catalogue.php::HasSlug", "class", "trait", 21, 27, "src/Catalogue.php"),
        ("src/Catalogue.php::HasSlug.slug", "method", "", 23, 26, "src/Catalogue.php::HasSlug"),
        ("src/Catalogue.php::Product", "class", "", 30, 40, "src/Catalogue.php"),
        ("src/Catalogue.php::Product.__construct", "method", "", 34, 34, "src/Catalogue.php::Product"),
        ("src/Catalogue.php::Product.describe", "method", "", 36, 39, "src/Catalogue.php::Product"),
        ("src/Catalogue.php::Availability", "class", "enum", 42, 46, "src/Catalogue.php"),
        ("src/Catalogue.php::cheapest", "function", "", 48, 51, "src/Catalogue.php"),
    ])
    e = by_id(parsed)
    assert e["src/Catalogue.php"].doc == "Catalogue entities."  # after the `<?php` tag
    assert e["src/Catalogue.php::Product"].doc == "A product in the catalogue."


def test_php_braced_namespace_is_a_container():
    code = src(r'''
        <?php
        namespace Shop\Legacy {
            function old_total() { return 0; }
        }
    ''')
    check_entities(extract("legacy.php", code, "php"), [
        ("legacy.php", "file", "", 1, 4, None),
        ("legacy.php::Shop\\Legacy", "module", "", 2, 4, "legacy.php"),
        ("legacy.php::Shop\\Legacy.old_total", "function", "", 3, 3, "legacy.php::Shop\\Legacy"),
    ])


def test_php_uses_requires_and_bases():
    assert matches("php", "imports", PHP) == [
        {"module": "Shop\\Contracts", "name": "Sellable"},
        {"module": "Shop\\Support", "name": "Money"},
        {"module": "Shop\\Support", "name": "Str", "alias": "S"},
        {"module": "/bootstrap.php"},  # require_once __DIR__ . '/bootstrap.php'
    ]
    assert matches("php", "inherits", PHP) == [
        {"base": "Entity"}, {"base": "Sellable"}, {"base": "Describable"}, {"base": "HasSlug"},
    ]


# --------------------------------------------------------------------------- Kotlin

KOTLIN = src(r'''
    /* Library loans. */

    package org.library.loans

    import java.time.LocalDate
    import org.library.books.Book as Title

    /** Days a loan lasts. */
    const val LOAN_DAYS = 21

    /** Something that can be borrowed. */
    interface Borrowable {
        fun borrow(on: LocalDate): Loan
    }

    enum class State { ACTIVE, RETURNED }

    open class Item(val title: Title)

    class Copy(title: Title, private val shelf: String) : Item(title), Borrowable, Comparable<Copy> {
        override fun borrow(on: LocalDate): Loan = Loan(this, on.plusDays(LOAN_DAYS.toLong()))

        override fun compareTo(other: Copy): Int = shelf.compareTo(other.shelf)

        companion object Shelves {
            fun parse(code: String): String = code.trim()
        }
    }

    data class Loan(val copy: Copy, val due: LocalDate)

    object Catalogue {
        fun find(shelf: String): Copy? = null
    }

    typealias Loans = List<Loan>

    fun overdue(loans: Loans, today: LocalDate): Loans {
        fun late(l: Loan) = l.due < today
        return loans.filter(::late)
    }
''')


def test_kotlin_entities():
    parsed = extract("Loans.kt", KOTLIN, "kotlin")
    check_entities(parsed, [
        ("Loans.kt", "file", "", 1, 41, None),
        ("Loans.kt::org.library.loans", "module", "package", 3, 3, "Loans.kt"),
        ("Loans.kt::LOAN_DAYS", "constant", "", 9, 9, "Loans.kt"),
        ("Loans.kt::Borrowable", "class", "interface", 12, 14, "Loans.kt"),
        ("Loans.kt::Borrowable.borrow", "method", "", 13, 13, "Loans.kt::Borrowable"),
        ("Loans.kt::State", "class", "enum", 16, 16, "Loans.kt"),
        ("Loans.kt::Item", "class", "", 18, 18, "Loans.kt"),
        ("Loans.kt::Copy", "class", "", 20, 28, "Loans.kt"),
        ("Loans.kt::Copy.borrow", "method", "", 21, 21, "Loans.kt::Copy"),
        ("Loans.kt::Copy.compareTo", "method", "", 23, 23, "Loans.kt::Copy"),
        ("Loans.kt::Copy.Shelves", "class", "object", 25, 27, "Loans.kt::Copy"),
        ("Loans.kt::Copy.Shelves.parse", "method", "", 26, 26, "Loans.kt::Copy.Shelves"),
        ("Loans.kt::Loan", "class", "", 30, 30, "Loans.kt"),
        ("Loans.kt::Catalogue", "class", "object", 32, 34, "Loans.kt"),
        ("Loans.kt::Catalogue.find", "method", "", 33, 33, "Loans.kt::Catalogue"),
        ("Loans.kt::Loans", "class", "type", 36, 36, "Loans.kt"),
        ("Loans.kt::overdue", "function", "", 38, 41, "Loans.kt"),
    ])
    e = by_id(parsed)
    assert e["Loans.kt"].doc == "Library loans."
    assert e["Loans.kt::LOAN_DAYS"].doc == "Days a loan lasts."
    assert e["Loans.kt::Borrowable"].doc == "Something that can be borrowed."
    # Kotlin names no body field: signatures still stop before the body.
    assert e["Loans.kt::Copy.borrow"].signature == "override fun borrow(on: LocalDate): Loan"
    assert e["Loans.kt::Catalogue"].signature == "object Catalogue"


def test_kotlin_imports_and_delegation_specifiers():
    assert matches("kotlin", "imports", KOTLIN) == [
        {"module": "java.time.LocalDate"},
        {"module": "org.library.books.Book", "alias": "Title"},
    ]
    assert matches("kotlin", "inherits", KOTLIN) == [
        {"base": "Item"}, {"base": "Borrowable"}, {"base": "Comparable<Copy>"},
    ]


# --------------------------------------------------------------------------- Bash

BASH = src(r'''
    #!/usr/bin/env bash
    # Back up a directory to a dated archive.

    set -euo pipefail
    source "$(dirname "$0")/lib/log.sh"
    . ./config.sh

    # Where archives are written.
    readonly BACKUP_ROOT=/var/backups

    declare -r KEEP=7

    # Archive name for today.
    archive_name() {
      printf '%s/%s.tar.gz\n' "$BACKUP_ROOT" "$(date +%F)"
    }

    function prune {
      local dir=$1
      ls -1t "$dir" | tail -n +$((KEEP + 1)) | while read -r old; do
        rm -f "$dir/$old"
      done
    }

    function main() {
      helper() { echo "inner"; }
      tar -czf "$(archive_name)" "$1"
      prune "$BACKUP_ROOT"
    }

    main "$@"
''')


def test_bash_entities():
    parsed = extract("bin/backup.sh", BASH, "bash")
    check_entities(parsed, [
        ("bin/backup.sh", "file", "", 1, 31, None),
        ("bin/backup.sh::BACKUP_ROOT", "constant", "", 9, 9, "bin/backup.sh"),  # KEEP has no comment
        ("bin/backup.sh::archive_name", "function", "", 14, 16, "bin/backup.sh"),
        ("bin/backup.sh::prune", "function", "", 18, 23, "bin/backup.sh"),
        ("bin/backup.sh::main", "function", "", 25, 29, "bin/backup.sh"),  # `helper` is part of main
    ])
    e = by_id(parsed)
    assert e["bin/backup.sh"].doc == "Back up a directory to a dated archive."  # the #! line is skipped
    assert e["bin/backup.sh::archive_name"].doc == "Archive name for today."
    assert e["bin/backup.sh::BACKUP_ROOT"].signature == "readonly BACKUP_ROOT=/var/backups"


def test_bash_sourced_files():
    assert matches("bash", "imports", BASH) == [
        {"module": '"$(dirname "$0")/lib/log.sh"'}, {"module": "./config.sh"},
    ]


# --------------------------------------------------------------------------- constants in Python

def test_python_documented_module_constants():
    code = src(r'''
        """Settings."""
        import re

        # Seconds before a request gives up.
        TIMEOUT = 30
        RETRIES = 3  # attempts per call
        # Matches a version tag.
        VERSION_RE = re.compile(r"v\d+")

        LEVEL = "info"

        if True:
            # Not at module level.
            DEBUG = False


        class Config:
            # A class attribute, not a module constant.
            NAME = "x"
    ''')
    parsed = extract("settings.py", code, "python")
    check_entities(parsed, [
        ("settings.py", "file", "", 1, 19, None),
        ("settings.py::TIMEOUT", "constant", "", 5, 5, "settings.py"),
        ("settings.py::VERSION_RE", "constant", "", 8, 8, "settings.py"),
        ("settings.py::Config", "class", "", 17, 19, "settings.py"),
    ])
    e = by_id(parsed)
    assert e["settings.py::TIMEOUT"].doc == "Seconds before a request gives up."
    assert e["settings.py::VERSION_RE"].doc == "Matches a version tag."  # not RETRIES' trailing comment
    assert e["settings.py::TIMEOUT"].body == "TIMEOUT = 30\nSeconds before a request gives up."


# --------------------------------------------------------------------------- robustness

@pytest.mark.parametrize("language, code", [
    ("go", GO), ("rust", RUST), ("java", JAVA), ("c", C), ("cpp", CPP), ("csharp", CSHARP),
    ("ruby", RUBY), ("php", PHP), ("kotlin", KOTLIN), ("bash", BASH),
])
def test_crlf_gives_the_same_entities(language, code):
    def key(parsed):
        return [(e.id, e.kind, e.subkind, e.start_line, e.end_line, e.parent_id, e.signature, e.doc)
                for e in parsed.entities]
    assert key(extract("x", code.replace(b"\n", b"\r\n"), language)) == key(extract("x", code, language))
