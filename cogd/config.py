"""Configuration: ``.cogd/config.toml`` over built-in defaults.

Standard library only (``tomllib``). The hook never imports this module (``tomllib`` and
``dataclasses`` cost it milliseconds); it reads ``[hook] deadline_ms`` itself, through the
same parser this module uses (:func:`cogd.rpc.client.parse_deadline_ms`). Unknown keys are ignored so a newer config never breaks an older
cogd; a malformed file raises :class:`ConfigError` with the parser's line and
column, and callers on the hook path fall back to the defaults.
"""

from __future__ import annotations

import math
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path

from cogd.errors import CogdError  # the one error type (standard library)
from cogd import safepath
from cogd.fusion import HYBRID, MODES, RRF_K, describe_modes
from cogd.rpc.client import DEADLINE_ENV, DEFAULT_DEADLINE_MS, parse_deadline_ms

# How the two association sources combine per entity, [rank] association_combine
# (cogd.retrieve.feedback.Feedback.association_terms).
ASSOCIATION_COMBINES: tuple[str, ...] = ("sum", "max", "pooled", "single")
TEST_CHANGES: tuple[str, ...] = ("always", "wanted")  # [history] test_changes
REQUEST_ORDERS: tuple[str, ...] = ("lines", "named")  # [history] request_order
REQUEST_MEMBERS: tuple[str, ...] = ("read", "all")  # [history] request_members
# Whether utility's boost also applies to what the request's history list names, [rank]
# utility_with_history (cogd.retrieve.feedback.Feedback.apply).
UTILITY_WITH_HISTORY: tuple[str, ...] = ("both", "once")
# Where history's file prior applies, [rank] history_file_prior_scope (cogd.retrieve.hybrid.select):
# every definition of a file, only the file's first appearance in the pack, or file pointers.
FILE_PRIOR_SCOPES: tuple[str, ...] = ("entities", "first", "pointers")
# How that prior meets the prompt's own file evidence, [rank] history_file_prior_combine
# (cogd.retrieve.hybrid.file_ranking): added to it, or multiplying it.
FILE_PRIOR_COMBINES: tuple[str, ...] = ("add", "product")

# The pack must stay under Claude Code's 10,000-character limit on injected
# text: beyond it the client swaps the pack for a short preview and a file path.
PACK_HARD_CAP_CHARS = 9_500
MAX_PARSE_TIMEOUT_MS = 60_000  # index.parse_timeout_ms is clamped to this


class ConfigError(CogdError, ValueError):
    """The config file exists but cannot be parsed or holds a bad value; kind ``config``.

    ``message`` names the file or the key and the value; ``fix``, when given, what to change.
    """

    def __init__(self, message: str, fix: str | None = None):
        super().__init__("config", message, fix)


@dataclass
class HookConfig:
    deadline_ms: int = DEFAULT_DEADLINE_MS  # wall-clock budget of one hook process, start to exit (ms)


@dataclass
class PackConfig:
    max_chars: int = 8000  # whole pack, rendered; capped at PACK_HARD_CAP_CHARS
    max_items: int = 12  # full items; further candidates become one-line pointers
    max_pointers: int = 8
    excerpt_items: int = 3  # how many top items carry a body excerpt
    excerpt_lines: int = 14
    # At most this many items from one file; 0 = no cap (MMR's redundancy term alone spreads the
    # pack over files). A cap cut the file the evidence ranks first: on the click development set
    # 3 cost 18 points of function recall against 8, and 8 cost 6.7 against none (README, "Which
    # definitions of a found file", where file recall did not move).
    per_file_cap: int = 0


@dataclass
class IndexConfig:
    max_file_bytes: int = 1 << 20  # files larger than this keep no code entities
    parse_timeout_ms: int = 2000  # a parse running longer is cancelled (status "timeout"); at most 60,000
    parse_workers: int = 0  # parser processes of the daemon (plus its save lane); 0 = one per core; at most 8 (cogd.index.parsepool)
    # Minified/generated text keeps no code entities: any line longer than this ...
    minified_line_bytes: int = 4096
    # ... or a mean line length above this (files of 4 KiB or more).
    minified_mean_line_bytes: int = 300
    refresh_debounce_ms: int = 1500  # minimum gap between freshness scans before packs
    fresh_wait_ms: int = 200  # how long a pack waits for that scan


@dataclass
class EmbedConfig:
    model_dir: str = ""  # a directory with model.onnx + tokenizer.json, or a static.npy its cogd-model.json pins; "" = `model` below
    model: str = "minilm-int8pc"  # with model_dir empty: "minilm-int8pc" (derived int8, default) | "minilm" (as shipped)
    text: str = "full"  # text per entity (cogd.embed.text.TEXT_STYLES): "full" | "words"
    threads: int = 0  # onnxruntime intra-op threads of the embedding pass; 0 = all cores (one while a request is in flight)
    max_tokens: int = 256  # sequence cap per text
    batch_size: int = 8  # texts per inference call (bigger batches of long texts cost memory)
    # and at most this many padded tokens per call (0 = no limit): 256-token texts go 3 at a time.
    # The arena holds the largest call's activations: after 2,000 stdlib texts the encoder's RSS
    # was 245.5 MB at 1,024, 216.1 at 768 and 190.8 at 512, for the same throughput
    # (scripts/bench_embed.py). 512 moved vectors enough (batch mates set the int8 scales) to
    # change a borderline hybrid pack of tests/test_hooks_e2e.py; 768 keeps it (docs/architecture.md,
    # "The encoder").
    batch_tokens: int = 768
    # A pass with at least this many entities to embed first gives every entity a static vector
    # (cogd.daemon.first_tier, the trained table shipped in cogd/embed/data: seconds, not minutes)
    # that searches use until the model catches up; 0 = off. 5,000 pending entities are a minute
    # or more of the transformer even on a quiet machine, which the tier's sync of every entity
    # (about 1,200-1,500 a second at a load of 8-10) pays for; smaller passes catch up before it
    # would help (docs/architecture.md, "The static model and the two tiers").
    first_tier_min: int = 5000
    enabled: bool = True  # False: lexical retrieval only, no model loaded


@dataclass
class RetrieveConfig:
    mode: str = HYBRID  # one of cogd.fusion.MODES
    candidates: int = 60  # per source, before fusion
    rrf_k: int = RRF_K  # reciprocal rank fusion constant (cogd.fusion)
    bm25_weight: float = 1.0  # weight of the BM25 list in the fusion
    vector_weight: float = 1.0  # weight of the KNN list in the fusion
    expand_decay: float = 0.3  # share of a seed's fused score passed one hop along an edge
    mmr_lambda: float = 0.7  # MMR trade-off: 1.0 = relevance only, 0.0 = diversity only
    # Prompt analysis (cogd.retrieve.prompt, cogd.retrieve.clues): fusion weights of the lists of
    # entities that traceback frames, file paths and identifiers of the prompt name; 0 = off.
    frame_weight: float = 2.0
    path_weight: float = 1.5
    identifier_weight: float = 1.0
    message_weight: float = 1.0  # ... of the entities holding the words of its printed errors and warnings
    idf_terms: bool = True  # a long prompt's BM25 terms chosen by IDF and part, not order (lexical.weighted_terms)
    strict_test_prior: bool = True  # a long prompt keeps tests at full weight only when it names a test
    vendor_prior: float = 0.3  # score × this for vendored third-party code the prompt does not name; 1 = off
    test_prior: float = 0.5  # score × this for tests when the prompt is not about tests
    file_rank_weight: float = 0.5  # file-level ranking: share of a file's aggregated evidence its entities gain
    file_rank_agg: str = "decay"  # a file's evidence from its entities: decay (best + ½ next …), max or sum
    long_prompt_terms: int = 24  # at most this many BM25 terms for a long prompt (chosen by weight)
    template_filter: bool = True  # a long prompt's issue-template headings and environment lines leave its terms
    compound_names: bool = True  # `py:method` → PyMethod, `ignore-paths` → ignore_paths, looked up as identifiers
    module_word_weight: float = 0.5  # file evidence for candidate files under a directory or module a prose word names
    module_weight: float = 1.0  # fusion weight of the files a dotted module name or a prose word names (long prompts)
    title_weight: float = 0.5  # fusion weight of a long prompt's first line searched alone (its title); 0 = off
    own_names: bool = True  # names a prompt's snippet defines for itself (class Point) are the reporter's, not clues
    # fusion weight of the files assigning __version__/VERSION for a version-bump prompt
    # ("start version 8.0"; cogd.retrieve.version): a printed path's weight; 0 = off
    version_weight: float = 1.5
    # The strongest candidate file's definitions are read from the BM25 list down to this rank (the
    # list itself is cut at `candidates`), each fused with the RRF term of its rank; 0 = off
    # (cogd.retrieve.hybrid._deepen; README, "Which definitions of a found file").
    file_depth: int = 300


@dataclass
class RankConfig:
    """How the usage ledger feeds ranking (:mod:`cogd.usage.utility`). Every weight 0 = feedback off.

    The defaults of ``utility_weight``, ``association_weight``, ``recency_weight``,
    ``evidence_k``, ``association_combine``, ``utility_history_k``, ``association_history_k`` and
    ``same_change_days`` were chosen
    by cross-validation over the development set's folds
    (``scripts/replay_sessions.py --cv``; README, "Replay evaluation").
    """

    utility_weight: float = 0.25  # score × exp(w·(utility − base rate)); utility is a Beta posterior mean
    prior_hits: float = 1.0  # Beta prior α: pseudo-hits every entity starts with
    prior_misses: float = 3.0  # Beta prior β: pseudo-misses (prior mean α/(α+β) = 0.25)
    working_set_weight: float = 0.5  # score × (1 + w) for entities touched in this session (half for their file)
    # score × (1 + w / (1 + position / 5)) for recently changed files (git order); 0: it did not pay
    # on every fold of the cross-validation
    recency_weight: float = 0.0
    # Weight of the query-association list in the fusion: the code earlier sessions edited after
    # prompts like this one (BM25 over those prompts; document expansion by past queries). 0 = off.
    # 0.5, history's own weight, since same_change_days counts a committed session once (README,
    # "One change read twice"); 0.25 before, with the global discount association_history_k.
    association_weight: float = 0.5
    # The same association list's second source: commit messages → the definitions those commits
    # changed (cogd.history; BM25 over the messages, recency decay, a cap per commit). 0 = off.
    history_association_weight: float = 0.5
    # How an entity's two association terms (sessions', history's) combine in the fusion:
    # "sum" (each source a list of its own), "max" (the stronger one), "pooled" (one list ordered
    # by their sum, fused at the larger weight), "single" (pooled, cut to one source's length);
    # cogd.retrieve.feedback.Feedback.association_terms. "pooled" by cross-validation (README,
    # "Why the two sources did not add up"): a committed session is in both sources, and "sum"
    # counted it twice.
    association_combine: str = "pooled"
    # Co-change (cogd.history): a seed's definitions changed with it in past commits gain
    # expand_decay × this × confidence(seed → partner) × the seed's score in the expansion step. 0 = off.
    co_change_weight: float = 0.5
    # File-level evidence from history: the files the commits matching a prompt changed gain this
    # share of the best file's evidence (× their history score over the best one's, × history's
    # credibility) in the file-level ranking ([retrieve] file_rank_weight). 0 = off.
    history_file_weight: float = 0.0
    # A file prior from history (Feedback.file_prior_shares): the share of history's change requests
    # that changed a file, relative to the most changed one, × this, as file-level evidence. 0 = off.
    # 1.25 with the "pointers" scope by cross-validation over the click set's folds (README, "The
    # file prior on the file order alone"; 0.5 on every definition before).
    history_file_prior: float = 1.25
    # Where that prior applies (FILE_PRIOR_SCOPES): "entities" lifts every definition of a file
    # by its file's prior; "first" only the file's first appearance in the pack (the candidate
    # that would be the file's first item: the file order), its other definitions rank as with
    # no prior; "pointers": no definition's score, the file order only — the strongest files of
    # the file-level ranking with the prior (history_file_prior_files of them) appear in that
    # order, a file's own entity placed as its pointer where its first definition would come
    # later (cogd.retrieve.hybrid.select).
    history_file_prior_scope: str = "pointers"
    history_file_prior_files: int = 5
    # "pointers" only: the pack's own first file stays first, the prior orders the ones after it
    # (without: the most changed file led most packs, file R@1 63.7 → 41.5 on click).
    history_file_prior_after_first: bool = True
    # How the prior meets the prompt's file evidence (FILE_PRIOR_COMBINES): "add" gives a file
    # with any candidate the prior's share of the best file's evidence, so a much-changed file
    # with one weak match can lead; "product" scales the file's own evidence by (1 + share),
    # so the prior reorders files the prompt's words already support. "product": on the click
    # set file R@5 92.1 against 92.4, on the issue-style set 79.5 against 77.0 (81.0 with no
    # prior); README, "The file prior on the file order alone".
    history_file_prior_combine: str = "product"
    # Learned sources (utility, association) are shrunk towards no effect until their evidence is
    # strong: weight × n / (n + evidence_k), n = earlier sessions that gave the source evidence
    # (cogd.evidence: Bühlmann credibility). At n = evidence_k a source has half its weight; 0 = no shrinkage.
    evidence_k: float = 10.0
    # The same shrinkage for history's sources (history_association_weight, co_change_weight), in
    # commits: n = the change requests mined and reachable from HEAD (co-change: the commits its
    # pairs are counted over). At n = history_evidence_k a source has half its weight; 0 = none.
    # Not chosen by the cross-validation: on click's stream n is in the hundreds (810 at HEAD), so k
    # hardly moves a pack there; 50 keeps a young repository (tens of commits) near history off.
    history_evidence_k: float = 50.0
    # Session sources discounted by what history already holds: utility's (association's) weight
    # × k / (k + n_history), n_history = history's reachable change requests while history
    # association is on (cogd.evidence.uncovered_share: a committed session's edits are in
    # history too, so the ledger's reading of them is a second count). At n_history = k the
    # source keeps half its weight; 0 = no discount. Utility's 800 by the replay's cross-validation
    # (README, "Session sources discounted by history"): click's ~800 requests halve it. The
    # association's 0 by the later one (README, "One change read twice"): same_change_days counts
    # the double reading per entity, where it happens, instead of discounting the whole source.
    utility_history_k: float = 800.0
    association_history_k: float = 0.0
    # Per entity instead: "once" drops utility's boost (a factor above 1: the entity's edits) for
    # an entity the request's history list names — history already counts those edits — and
    # keeps its penalty (deliveries left unused, which history cannot hold); "both" applies it.
    utility_with_history: str = "both"
    # One change read twice: a session's edit of an entity and a commit that changed the same
    # entity within this many days of it (either side: author and committer clocks, rebases) are
    # the same change once committed, so where both association sources name an entity for that
    # reason its two terms count once (the larger), not summed
    # (cogd.retrieve.feedback.Feedback.same_change). 0 = off (every agreement sums). 7 by the
    # replay's cross-validation (rule worst, with association_weight 0.5 and association_history_k 0).
    same_change_days: float = 7.0


@dataclass
class UsageConfig:
    """Hit/miss accounting."""

    # A hit adds its weight to the entity's successes (and nothing to its failures). Reading or
    # finding an item is a hit — the agent looked — but proves no use: by default it is neutral, so
    # a distractor the agent reads and never edits is not rewarded; an edit is.
    edit_weight: float = 1.0
    read_weight: float = 0.0
    search_weight: float = 0.0
    # A miss records the item's examination probability as its failure: 1 / (1 + (rank − 1) / h)
    # with h = miss_halflife_ranks (0 = every miss counts 1), times pointer_miss_weight for a pointer.
    miss_halflife_ranks: float = 5.0
    pointer_miss_weight: float = 0.5
    # Replays and tests may pass the event time as the request's ``now``
    # (the hook client forwards $COGD_NOW); a real daemon uses its own clock.
    trust_client_clock: bool = False


@dataclass
class DaemonConfig:
    idle_exit_s: int = 6 * 3600  # exit after this long without a request; 0 = never
    # How long a built pack waits for its hook's acknowledgement (sent once the pack is printed)
    # before it is withdrawn as never delivered. The hook acks within microseconds of reading the
    # answer; the margin is for a hook process descheduled on an overloaded machine.
    ack_wait_ms: int = 10_000
    restart_backoff_s: int = 60  # after a failed start, hooks wait this long (doubling per failure) before another
    # Background work gives way to requests (cogd.daemon.scheduling). Between encoder batches the
    # embedder waits while a request is in flight and for preempt_quiet_ms after the last one, at most
    # preempt_max_ms in a row (0 = never waits); its thread and the consolidator's run at this nice value
    # (0-19; 0 = the daemon's own). Measured with scripts/bench_hooks.py --load (docs/architecture.md):
    # the nice value is what cuts hook latency; a quiet window of 250 ms cost embedding throughput for nothing.
    preempt_quiet_ms: int = 0
    preempt_max_ms: int = 2000
    background_nice: int = 10


@dataclass
class WatchConfig:
    """The file watcher (:mod:`cogd.daemon.watcher`)."""

    enabled: bool = True  # False: no watcher; edits reach the index through hooks and pre-pack scans only
    debounce_ms: int = 50  # a batch is flushed after this long without a new event ...
    max_delay_ms: int = 500  # ... or this long after its first event, whichever comes first
    poll_interval_s: float = 2.0  # polling fallback: seconds between whole-tree stat refreshes
    force_polling: bool = False  # True: skip inotify and poll (for file systems without inotify, e.g. some network mounts)


@dataclass
class MemoryConfig:
    """Memory records (:mod:`cogd.memory`)."""

    show_stale: bool = True  # packs show stale memories with their age and a "may be outdated" mark; False leaves them out
    # Prompt packs also show matching candidates (agent-written, not yet confirmed), marked so: without
    # delivery a candidate could never earn the hits in two sessions that promote it. False leaves them out.
    show_candidates: bool = True
    # Embedding cosine at or above which a new memory duplicates an active one of its type. High on
    # purpose: with MiniLM a claim and its negation score 0.95 ("returns naive" / "returns aware").
    duplicate_similarity: float = 0.97
    tombstone_similarity: float = 0.92  # ... at or above which it is near a rejected one (accepted only as candidate, with a warning)


@dataclass
class ConsolidateConfig:
    """Consolidation of memories (:mod:`cogd.memory.consolidate`): on session end, when idle, `cogd consolidate`."""

    enabled: bool = True  # False: the daemon never consolidates on its own (`cogd consolidate` still works)
    idle_after_s: int = 600  # consolidate once per idle stretch of this many seconds without requests; 0 = never
    # Dedup of paraphrases: embedding cosine at or above this AND rapidfuzz token_set_ratio of the normalised
    # texts at or above token_agreement, and no sign of a contradiction (a flipped negation, one or two words
    # swapped). Measured with MiniLM: paraphrases 0.74-0.94, a claim and its negation 0.93-0.99 (see docs/memory.md).
    similarity: float = 0.85
    token_agreement: float = 70.0  # token_set_ratio (0-100); paraphrases measured 72-82
    promote_hit_sessions: int = 2  # a candidate hit in this many distinct sessions becomes active; 0 = never
    promote_corroborations: int = 1  # ... or merged with this many duplicates from other sessions; 0 = never
    decay_min_misses: int = 10  # an active memory delivered this often since its last hit (or activation) ...
    decay_horizon_days: float = 30.0  # ... and not hit for this many days goes stale; 0 misses = never
    retention_days: float = 90.0  # rejected and superseded memories older than this are pruned; 0 = never


@dataclass
class SnapshotConfig:
    """Index snapshots on shared storage (:mod:`cogd.snapshot`; README "Teams: index snapshots")."""

    # Where snapshots live: "file:///shared/dir" or "s3://bucket/prefix"; "" = off. Credentials for
    # s3:// come from the usual AWS_* environment variables only, never from a config file.
    uri: str = ""
    endpoint: str = ""  # an S3-compatible service's URL (e.g. "http://127.0.0.1:9000"); "" = AWS itself
    region: str = ""  # S3 region; "" = the SDK's default (AWS_REGION / AWS_DEFAULT_REGION)
    repo_id: str = ""  # the repository's folder in the store; "" = its root commit (the same on every clone)
    max_ancestors: int = 200  # HEAD and this many commits before it are searched for a snapshot
    max_mb: int = 8192  # a snapshot larger than this (MB, uncompressed) is refused
    pull_on_start: bool = True  # a daemon that starts with no index pulls the nearest snapshot first


@dataclass
class HistoryConfig:
    """History mining (:mod:`cogd.history`; README "History as memory")."""

    enabled: bool = True  # mine the repository's commits in the background after the first index
    max_commits: int = 3000  # the newest commits reachable from HEAD considered (merges and skipped included)
    time_budget_s: float = 900.0  # one mining pass stops after this long; the rest waits for the next pass
    poll_s: float = 2.0  # how often HEAD is compared with the last synchronised one
    max_files: int = 25  # a commit changing more source files than this is a mass change (skipped)
    max_definitions: int = 60  # … or more definitions than this (reformatting, renames)
    max_blob_bytes: int = 1 << 20  # a parent's file larger than this is mapped to its file entity only
    co_change_max_definitions: int = 10  # commits touching more definitions count for no co-change pair
    co_change_min_support: int = 2  # a pair needs this many commits in common
    co_change_min_confidence: float = 0.3  # confidence(seed → partner) needed to expand across it
    association_commits: int = 20  # best-matching change requests read per query (40 measured no better, and slower)
    per_commit: int = 6  # definitions one commit contributes at most (most changed lines first)
    max_associations: int = 20  # entities the history source adds to the fusion at most
    half_life_days: float = 365.0  # a commit's weight halves per this many days before the newest one
    # One request, one vote: the k-th of a request's definitions (most changed lines first) gets
    # k ** -request_decay of its weight, so one matched commit cannot fill the list (0: all equal).
    # 1 (1/k) by the replay's cross-validation (README, "History's crowding").
    request_decay: float = 1.0
    # A matched request counts only when its BM25 score is at least this share of the best matched
    # request's (0: any match; at most 1): one shared common word is not the same change.
    min_match_share: float = 0.0
    # A request's test edits when the prompt does not ask for tests: "wanted" leaves them out of
    # the request's change (they take neither its first share nor its per_commit places from the
    # code it changed; cogd.history.store.associated's leave_out), "always" keeps them. "always"
    # by the replay's cross-validation, rule worst ("wanted" raises the second half's fn R from
    # 77.9 to 79.9 and is rule mean's choice, but costs fold 2: README, "Test edits in history's votes").
    test_changes: str = "always"
    # Document expansion: a commit is also found by the names of the definitions it changed, its
    # score its message's BM25 plus name_weight x its names' BM25 (0: the message alone).
    name_weight: float = 0.0
    # How a request's definitions take its shares and per_commit places: "lines" (most changed
    # lines first) or "named" (those whose names share a word with the prompt first).
    request_order: str = "lines"
    # Which commits of a matched pull request make its change: "read" (those whose rows the
    # message search returned: matched through one member's own message, the request is that
    # member's change) or "all" (every live mined commit it merged, however it was matched).
    request_members: str = "read"
    # A commit whose message is the prompt itself (case and spacing aside) is not used for it: a
    # prompt quoting a commit verbatim (a replay, a cherry-pick) must not be answered by that commit.
    mask_exact_message: bool = True
    # A merge's text (a pull request's title and body) is searchable for the commits it merged,
    # and they count as one change request while the merge is reachable.
    pull_requests: bool = True


@dataclass
class Config:
    hook: HookConfig = field(default_factory=HookConfig)
    pack: PackConfig = field(default_factory=PackConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    retrieve: RetrieveConfig = field(default_factory=RetrieveConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    rank: RankConfig = field(default_factory=RankConfig)
    usage: UsageConfig = field(default_factory=UsageConfig)
    consolidate: ConsolidateConfig = field(default_factory=ConsolidateConfig)
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    history: HistoryConfig = field(default_factory=HistoryConfig)


def _apply(section: object, values: dict, where: str) -> None:
    known = {f.name for f in fields(section)}  # type: ignore[arg-type]
    for key, value in values.items():
        if key not in known:
            continue
        current = getattr(section, key)
        if type(current) is bool:
            if type(value) is not bool:
                raise ConfigError(f"{where}.{key} must be true or false, got {value!r}")
        elif type(current) is int:
            if type(value) is not int or value < 0:
                raise ConfigError(f"{where}.{key} must be a non-negative integer, got {value!r}")
        elif type(current) is float:
            if type(value) not in (int, float) or value < 0:
                raise ConfigError(f"{where}.{key} must be a non-negative number, got {value!r}")
            value = float(value)
        elif type(current) is str and not isinstance(value, str):
            raise ConfigError(f"{where}.{key} must be a string, got {value!r}")
        setattr(section, key, value)


def _check_choice(section: object, name: str, key: str, choices: tuple[str, ...]) -> None:
    """Raise ConfigError unless ``section.key`` (the ``[name]`` table's setting) is one of ``choices``."""
    value = getattr(section, key)
    if value not in choices:
        raise ConfigError(f"{name}.{key} must be one of {', '.join(choices)}, got {value!r}")


def _check_finite(section: object, where: str) -> None:
    """Raise ConfigError for an infinite or NaN float (TOML allows ``inf`` and ``nan``; a weight cannot be either)."""
    for f in fields(section):  # type: ignore[arg-type]
        value = getattr(section, f.name)
        if type(value) is float and not math.isfinite(value):
            raise ConfigError(f"{where}.{f.name} must be a finite number, got {value!r}")


def load_config(path: Path | None) -> Config:
    """Read ``path`` (a ``config.toml``) over the defaults.

    A missing file gives the defaults. Raises ConfigError on a TOML syntax
    error (message includes line and column) or a value of the wrong type.
    ``COGD_HOOK_DEADLINE_MS`` in the environment overrides ``hook.deadline_ms``; either is
    read as the hook reads it (an unusable value falls through to the next, a large one is
    clamped to ``cogd.rpc.client.MAX_DEADLINE_MS``), so ``hook.deadline_ms`` is the deadline
    hooks really have.
    """
    config = Config()
    try:  # never through a link, never another user's file (cogd.safepath)
        raw = safepath.read_bytes(path, 1 << 20) if path is not None and not os.path.isdir(path) else None
    except safepath.UnsafePath as exc:
        raise ConfigError(str(exc)) from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from exc
    if raw is not None:
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: {exc}") from exc
        for name in ("hook", "pack", "index", "embed", "retrieve", "daemon", "watch", "rank", "usage", "memory",
                     "consolidate", "snapshot", "history"):
            section = data.get(name)
            if isinstance(section, dict):
                _apply(getattr(config, name), section, name)
    # The deadline the hook will really use: the same parser, the same order (environment, file, default).
    config.hook.deadline_ms = (parse_deadline_ms(os.environ.get(DEADLINE_ENV, ""))
                               or parse_deadline_ms(config.hook.deadline_ms) or DEFAULT_DEADLINE_MS)
    config.pack.max_chars = min(config.pack.max_chars, PACK_HARD_CAP_CHARS)
    # A committed config is the repository's say: it may not switch off the guard against its own
    # hostile files (the parse pool waits twice this long before it kills a worker).
    config.index.parse_timeout_ms = min(config.index.parse_timeout_ms, MAX_PARSE_TIMEOUT_MS)
    if config.daemon.background_nice > 19:
        raise ConfigError(f"daemon.background_nice must be 0-19 (a Linux nice value), got {config.daemon.background_nice}")
    # A committed config cannot stall embedding behind requests for long either (at most a minute in a row).
    config.daemon.preempt_max_ms = min(config.daemon.preempt_max_ms, 60_000)
    config.daemon.preempt_quiet_ms = min(config.daemon.preempt_quiet_ms, config.daemon.preempt_max_ms)
    if config.rank.prior_hits <= 0 or config.rank.prior_misses <= 0:
        raise ConfigError("rank.prior_hits and rank.prior_misses must be above 0 (a Beta prior)")
    _check_finite(config.rank, "rank")
    _check_choice(config.rank, "rank", "utility_with_history", UTILITY_WITH_HISTORY)
    _check_choice(config.rank, "rank", "association_combine", ASSOCIATION_COMBINES)
    _check_choice(config.rank, "rank", "history_file_prior_combine", FILE_PRIOR_COMBINES)
    _check_choice(config.rank, "rank", "history_file_prior_scope", FILE_PRIOR_SCOPES)
    _check_finite(config.history, "history")
    _check_choice(config.history, "history", "test_changes", TEST_CHANGES)
    _check_choice(config.history, "history", "request_members", REQUEST_MEMBERS)
    _check_choice(config.history, "history", "request_order", REQUEST_ORDERS)
    if config.history.min_match_share > 1:
        raise ConfigError(f"history.min_match_share is a share of the best match's score in [0, 1], "
                          f"got {config.history.min_match_share}")
    if config.retrieve.mode not in MODES:
        raise ConfigError(f"retrieve.mode must be {describe_modes()}, got {config.retrieve.mode!r}")
    if config.consolidate.similarity > 1 or config.consolidate.token_agreement > 100:
        raise ConfigError("consolidate.similarity is a cosine in [0, 1] and consolidate.token_agreement a ratio in [0, 100]")
    return config
