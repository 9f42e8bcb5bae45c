#!/usr/bin/env python3
"""Train a static token table on real code text (cogd.embed.static_fit) and write it as a model folder.

What it does
------------
1. Corpus: every entity that ``cogd.index.extract`` finds in the running interpreter's
   standard library (all ``*.py`` files, tests included: real code nobody here wrote), as the
   text the daemon embeds (``cogd.embed.text.entity_text``, style ``full``); distinct texts,
   shuffled with a fixed seed. The first ``--holdout`` texts are held out, the next
   ``--texts`` train. ``--short N`` adds N short, query-like texts: a docstring's first
   sentence (two thirds) and a qualified name's words (``name_words``), shuffled alike.
   Never train on the development repository's code (pallets/click): that would leak into
   ``scripts/eval_retrieval.py``.
2. Targets: the default encoder's vectors (``EmbedConfig()``: the derived int8 MiniLM,
   256 tokens) of those texts, made in chunks of ``--chunk`` and kept in ``--targets DIR``
   (``texts.json`` + ``yNNN.npy``), so a larger run reuses a smaller one's chunks. The rate
   is printed per chunk: this is the expensive step (one transformer pass per text).
3. Fit: ``static_fit`` ridge regression from the distilled table (``embed.model =
   "minilm-static"``, distilled first if missing) for every ``--lam``; printed per value:
   the held-out texts' mean cosine to their targets and the ten-nearest-neighbour overlap,
   beside the same for the distilled table (mapped into the target basis) as the baseline.
4. Output (``--out DIR``): the table of the ``--lam`` with the best held-out cosine, as
   ``DIR/static.npy`` with ``DIR/cogd-model.json`` pinning its sha256 (folder 0700, files
   0600), which ``[embed] model_dir = "DIR"`` loads as a static model
   (``cogd.embed.model``); ``DIR/train.json`` records the run's settings and scores. With
   ``--int8 CAP`` the table is written as ``DIR/static.npz`` instead, in the format cogd ships
   (``cogd.embed.static_table``: int8 codes, a scale per row, the encoder's token cap CAP);
   ``--convert FOLDER --int8 CAP --out DIR`` does only that, from an earlier run's float table.
   The shipped ``cogd/embed/data/static_code.npz`` is such a file (its NOTICE gives the command).

How to run
----------
    /tmp/venv/bin/python scripts/train_static.py --targets /tmp/st-targets --texts 5000 \\
        --holdout 1000 [--short 16000] [--lam 0.01 0.03] [--dim 256] [--min-df 2] [--int8 512] --out /tmp/st-5k
    /tmp/venv/bin/python scripts/train_static.py --convert /tmp/st-5k --int8 512 --out /tmp/st-5k-int8
    /tmp/venv/bin/python scripts/eval_retrieval.py --git-dir <click.git> --arms hybrid --no-context \\
        --set embed.model_dir=/tmp/st-5k
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CORPUS_SEED, SHORT_SEED = 7, 11
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")
_SPACE = re.compile(r"\s+")


def stdlib_entities() -> list:
    """Every entity of the standard library's ``*.py`` files (sorted paths; unparsable files skipped)."""
    from cogd.index.extract import extract

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    paths = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts and "__pycache__" not in p.parts)
    out = []
    for path in paths:
        try:
            out.extend(extract(path.relative_to(stdlib).as_posix(), path.read_bytes(), "python").entities)
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            print(f"skipped {path}: {exc}", file=sys.stderr)
    return out


def corpus(entities: list) -> list[str]:
    """The distinct embedding texts of ``entities``, shuffled with :data:`CORPUS_SEED`."""
    from cogd.embed.text import entity_text

    texts = sorted({entity_text(e.kind, e.qualname, e.signature, e.doc, e.body, e.path) for e in entities})
    random.Random(CORPUS_SEED).shuffle(texts)
    return texts


def short_corpus(entities: list, total: int) -> list[str]:
    """``total`` short texts: docstring first sentences (2/3, at least 3 words, at most 200
    characters) and qualified-name words (at least 2), shuffled with :data:`SHORT_SEED`."""
    from cogd.embed.text import name_words

    docs, names = set(), set()
    for e in entities:
        first = _SENTENCE_END.split(_SPACE.sub(" ", e.doc or "").strip(), maxsplit=1)[0][:200]
        if len(first.split()) >= 3:
            docs.add(first)
        words = name_words(e.qualname)
        if len(words.split()) >= 2:
            names.add(words)
    rng = random.Random(SHORT_SEED)
    docs_l, names_l = sorted(docs), sorted(names)
    rng.shuffle(docs_l)
    rng.shuffle(names_l)
    texts = docs_l[:total * 2 // 3] + names_l[:total - min(len(docs_l), total * 2 // 3)]
    rng.shuffle(texts)
    return texts


def targets(texts: list[str], folder: Path, count: int, chunk: int, batch_size: int) -> np.ndarray:
    """The default encoder's vectors (count, 384) of ``texts[:count]``, cached in ``folder``.

    ``folder/texts.json`` must list the same texts as an earlier run (else SystemExit); chunks
    already there are reused whatever their size, new ones hold ``chunk`` texts.
    """
    from cogd.config import EmbedConfig
    from cogd.embed.encoder import load_encoder
    from cogd.embed.model import resolve_model

    folder.mkdir(parents=True, exist_ok=True)
    listed = folder / "texts.json"
    if listed.exists():
        if json.loads(listed.read_text(encoding="utf-8"))[:count] != texts[:count]:
            raise SystemExit(f"{listed} lists other texts: use another --targets folder")
    else:
        listed.write_text(json.dumps(texts), encoding="utf-8")
    have = [np.load(f) for f in sorted(folder.glob("y*.npy"))]
    done = sum(len(y) for y in have)
    encoder = None
    while done < count:
        if encoder is None:
            cfg = EmbedConfig()
            encoder = load_encoder(resolve_model(cfg), threads=2, max_tokens=cfg.max_tokens,
                                   batch_size=batch_size, batch_tokens=cfg.batch_tokens)
        started = time.perf_counter()
        part = encoder.encode(texts[done:done + chunk]).astype(np.float32)
        np.save(folder / f"y{len(have):03d}.npy", part)
        have.append(part)
        done += len(part)
        print(f"  targets {done}/{count}: {len(part) / (time.perf_counter() - started):.1f} texts/s, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)
    return np.concatenate(have)[:count].astype(np.float64)


def write_model(folder: Path, table: np.ndarray, name: str, record: dict, int8_tokens: int = 0) -> str:
    """``table`` as ``folder/static.npy`` with its pinning manifest (0700 / 0600); returns its sha256.

    ``int8_tokens`` > 0: as ``folder/static.npz`` instead, the shipped int8 format
    (:mod:`cogd.embed.static_table`, a scale per row) recording that token cap."""
    import io

    from cogd.embed import static_table

    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    if int8_tokens:
        data, table_name = static_table.table_bytes(*static_table.quantize(table), int8_tokens), "static.npz"
    else:
        buffer = io.BytesIO()
        np.save(buffer, table.astype("<f4"), allow_pickle=False)
        data, table_name = buffer.getvalue(), "static.npy"
    digest = hashlib.sha256(data).hexdigest()
    for stale in ("static.npy", "static.npz"):
        if stale != table_name:
            (folder / stale).unlink(missing_ok=True)
    for file_name, content in ((table_name, data),
                               ("cogd-model.json", json.dumps({"name": name, "sha256": digest,
                                                               "dim": int(table.shape[1])}).encode()),
                               ("train.json", json.dumps(record, indent=1).encode())):
        tmp = folder / f".{file_name}.tmp"
        tmp.write_bytes(content)
        os.chmod(tmp, 0o600)
        os.replace(tmp, folder / file_name)
    return digest


def fit(args, train_x, train_y, hold_x, hold_y) -> tuple[np.ndarray, dict]:
    """Every ``--lam``'s table; returns the best (by held-out cosine) and the run's record."""
    from tokenizers import Tokenizer

    from cogd.config import EmbedConfig
    from cogd.embed import static_fit as sf
    from cogd.embed.model import BUNDLED_TOKENIZER, resolve_model

    tokenizer = Tokenizer.from_file(str(BUNDLED_TOKENIZER))
    rows, held = sf.token_rows(tokenizer, train_x, args.max_tokens), sf.token_rows(tokenizer, hold_x, args.max_tokens)
    distilled = np.load(resolve_model(EmbedConfig(model="minilm-static")).path, allow_pickle=False)
    basis = sf.target_basis(train_y, args.dim)
    goal = train_y @ basis
    init = sf.mapped_init(rows, goal, distilled)
    record = {"texts": len(train_x) - args.short, "short": args.short, "holdout": len(hold_x), "dim": args.dim,
              "min_df": args.min_df, "max_tokens": args.max_tokens,
              "distilled": sf.holdout_scores(held, init, hold_y, basis), "lam": {}}
    print(f"distilled table (mapped): held-out {record['distilled']}", flush=True)
    free = sf.free_ids(rows, len(distilled), args.min_df)
    started = time.perf_counter()
    gram, rhs = sf.normal_equations(rows, goal, init, free)
    print(f"{len(free)} free rows; normal equations in {time.perf_counter() - started:.0f} s", flush=True)
    best = None
    for lam in args.lam:
        started = time.perf_counter()
        table = init.copy()
        table[free] = sf.ridge_solve(gram, rhs, init[free], lam)
        scores = sf.holdout_scores(held, table, hold_y, basis)
        record["lam"][f"{lam:g}"] = scores
        print(f"lam {lam:g}: held-out {scores} ({time.perf_counter() - started:.0f} s)", flush=True)
        if best is None or scores["cos"] > best[0]:
            best = (scores["cos"], lam, table)
    record["chosen_lam"] = best[1]
    return best[2], record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--targets", type=Path, help="folder caching the corpus targets (required unless --convert)")
    ap.add_argument("--short-targets", type=Path, help="folder caching the short texts' targets "
                    "(default: TARGETS/short)")
    ap.add_argument("--texts", type=int, default=5000, help="training texts (after the held-out ones)")
    ap.add_argument("--holdout", type=int, default=1000)
    ap.add_argument("--short", type=int, default=0, help="short query-like texts added to the training set")
    ap.add_argument("--lam", type=float, nargs="+", default=[0.01])
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--min-df", type=int, default=2, help="rows fitted: tokens in at least this many texts")
    ap.add_argument("--max-tokens", type=int, default=256, help="tokens of a text counted (the targets' cap)")
    ap.add_argument("--chunk", type=int, default=1000, help="texts per target chunk")
    ap.add_argument("--out", type=Path, help="model folder to write (static.npy + cogd-model.json)")
    ap.add_argument("--name", default="", help="model name in the manifest (default: the folder's name)")
    ap.add_argument("--int8", type=int, default=0, metavar="CAP", help="write static.npz, the shipped int8 "
                    "format (cogd.embed.static_table) whose encoder averages a text's first CAP tokens, "
                    "not static.npy (whose encoder averages 512)")
    ap.add_argument("--convert", type=Path, metavar="FOLDER", help="no training: write FOLDER/static.npy "
                    "(a trained table) to --out in the --int8 format (--targets is then ignored)")
    args = ap.parse_args()
    started = time.perf_counter()
    if args.convert:
        if not (args.out and args.int8):
            raise SystemExit("--convert needs --out and --int8")
        record = json.loads((args.convert / "train.json").read_text(encoding="utf-8"))
        table = np.load(args.convert / "static.npy", allow_pickle=False)
        record["int8_from"] = str(args.convert)
        digest = write_model(args.out, table, args.name or args.out.resolve().name, record, args.int8)
        print(f"wrote {args.out}/static.npz (sha256 {digest}, token cap {args.int8})")
        return
    if not args.targets:
        raise SystemExit("--targets is required")
    entities = stdlib_entities()
    texts = corpus(entities)
    print(f"{len(texts)} distinct stdlib entity texts ({time.perf_counter() - started:.0f} s)", flush=True)
    need = args.holdout + args.texts
    if need > len(texts):
        raise SystemExit(f"--holdout + --texts = {need} > {len(texts)} texts")
    ys = targets(texts, args.targets, need, args.chunk, 8)
    train_x, train_y = texts[args.holdout:need], ys[args.holdout:need]
    if args.short:
        short = short_corpus(entities, args.short)
        sy = targets(short, args.short_targets or args.targets / "short", len(short), 2 * args.chunk, 32)
        train_x, train_y = train_x + short, np.concatenate([train_y, sy])
    table, record = fit(args, train_x, train_y, texts[:args.holdout], ys[:args.holdout])
    if args.out:
        digest = write_model(args.out, table, args.name or args.out.resolve().name, record, args.int8)
        print(f"wrote {args.out}/static.{'npz' if args.int8 else 'npy'} (sha256 {digest}); "
              f"[embed] model_dir = \"{args.out}\"")
    print(f"done in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
