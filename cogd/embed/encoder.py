"""Turn texts into unit vectors with an ONNX sentence-embedding model on the CPU (or a static table).

:class:`StaticEncoder` does the same with the static token table of
:mod:`cogd.embed.static` (a weighted mean of token rows, no onnxruntime);
:func:`load_encoder` picks the class a :class:`ModelInfo` needs.

Pipeline per batch: WordPiece tokenisation (``tokenizers``; one tokenizer
object per file for the whole process, :func:`shared_tokenizer`), truncated to
``max_tokens`` tokens including ``[CLS]``/``[SEP]`` and padded to the longest
text of the batch; one onnxruntime run; mean pooling of the token vectors over
the attention mask; L2 normalisation. Texts are processed shortest first (by
characters) so that batches hold texts of similar length and little padding;
results come back in the caller's order.

Batches: every text is tokenised once (truncated, unpadded), the texts are
ordered by token count, and each batch is padded to its own longest text, so
a batch holds texts of nearly the same length and little padding is computed.
A batch holds at most ``batch_size`` texts and, when ``batch_tokens`` is set,
at most ``batch_tokens`` padded tokens (long texts then go in smaller batches).

Light mode: ``encode(texts, threads=1)`` runs on a second onnxruntime session
with that many intra-op threads (built on first use from the same verified
bytes; its weights are a second copy, see ``docs/architecture.md`` for the
measured cost), so a caller can drop to one core between two batches while
hooks need the CPU and go back to all threads afterwards. ``threads`` may
also be a function, asked before every batch.

Memory: the bundled model stores int8 weights that are dequantised by
Cast/Mul nodes; onnxruntime's constant folding (graph optimisations on) turns
them into float32 once, at load, so a loaded encoder holds about 200 MB
(weights plus pre-packed copies) on top of the interpreter. Activations add
roughly ``b × s × 1536 × 4`` bytes per layer for a batch of ``b`` texts of ``s``
tokens (attention maps ``b × 12 × s² × 4``); the CPU arena keeps the largest
batch's worth, about 170–190 MB for 8 × 256, which is why the default batch is small.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from cogd.embed.model import ModelError, ModelInfo, read_verified

MIN_TOKENS = 4  # [CLS], [SEP] and at least two tokens of text
MAX_TOKENS = 512  # the position table of BERT-family models
GATHER_TOKENS = 4096  # token rows a static encode gathers at once: 4 MB of float32 at 256-d (16,384 held 16 MB of scratch and was 9% slower, same vectors)


_TOKENIZERS: dict[tuple, tuple] = {}  # (path, size, mtime) -> (tokenizers.Tokenizer, pad id)
_TOKENIZERS_LOCK = threading.Lock()


def shared_tokenizer(path: Path):
    """``(tokenizer, pad_id)``: one ``tokenizers.Tokenizer`` per tokenizer file, shared by every encoder.

    The transformer and the static first tier read the same ``tokenizer.json``, and a loaded
    tokenizer holds about 6 MB (its vocabulary's maps: measured 6.0 MB for a second copy), so
    the process keeps one, set to neither truncate nor pad; each encoder cuts its own token
    lists (:func:`truncated`), which a shared object could not do through its settings (they
    are per object, and encoders run in several threads). ``pad_id`` is the file's padding id
    (``[PAD]`` when it names none). A file replaced on disk (another size or mtime) is loaded
    again. Raises whatever ``Tokenizer.from_file`` raises (callers wrap it in ModelError).
    """
    from tokenizers import Tokenizer

    stat = os.stat(path)
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _TOKENIZERS_LOCK:
        found = _TOKENIZERS.get(key)
        if found is None:
            tokenizer = Tokenizer.from_file(str(path))
            padding = tokenizer.padding or {}
            pad_id = tokenizer.token_to_id(padding.get("pad_token") or "[PAD]")
            if pad_id is None:
                pad_id = padding.get("pad_id", 0)
            tokenizer.no_truncation()
            tokenizer.no_padding()
            found = _TOKENIZERS[key] = (tokenizer, int(pad_id))
        return found


def truncated(ids: list[int], max_tokens: int, special: bool) -> list[int]:
    """``ids`` cut to ``max_tokens`` as the tokenizer's own truncation would (``longest_first``,
    a single sequence): the first tokens kept; with ``special`` (a ``[CLS] … [SEP]`` template
    already applied) the closing special token stays last."""
    if len(ids) <= max_tokens:
        return ids
    return ids[:max_tokens - 1] + ids[-1:] if special else ids[:max_tokens]


_SHARED_ARENA: bool | None = None  # None: not tried yet; True: registered in onnxruntime's environment
_SHARED_ARENA_LOCK = threading.Lock()


def _shared_arena() -> bool:
    """Register one CPU arena in onnxruntime's process environment, once; True when sessions can share it.

    Every session otherwise keeps an arena of its own, sized by its largest
    batch: the light session would add a second one (measured +54 MB at 128
    tokens). A failure to register (an onnxruntime without the call) leaves
    each session its own arena.
    """
    global _SHARED_ARENA
    with _SHARED_ARENA_LOCK:
        if _SHARED_ARENA is None:
            import onnxruntime as ort

            try:
                info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
                ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
                _SHARED_ARENA = True
            except Exception:  # onnxruntime's own exception types; also "already registered"
                _SHARED_ARENA = False
        return _SHARED_ARENA


def default_threads() -> int:
    """All CPUs this process may run on but one, at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


def _clean(text: str) -> str:
    """``text`` as valid Unicode for the tokenizer, which rejects surrogate code points.

    A surrogate pair spelled as two code points becomes the character it
    encodes; a lone surrogate becomes U+FFFD.
    """
    if not isinstance(text, str):
        raise TypeError(f"texts must be str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


class Encoder:
    """A loaded model: ``encode`` texts to float32 unit vectors of ``info.dim``.

    ``threads``: onnxruntime intra-op threads of the main session; 0 →
    :func:`default_threads`. ``max_tokens``: sequence cap per text, special
    tokens included (4–512); longer texts are truncated, not split.
    ``batch_size``: at most this many texts per inference call (>= 1).
    ``batch_tokens``: when > 0, a batch also holds at most this many padded
    tokens (texts × longest text); a single text longer than that still goes
    alone; the default 1,024 is ``EmbedConfig().batch_tokens`` (measured: peak RSS
    of an encoder after 512 stdlib texts at 256 tokens 242 MB, 353 MB without).
    Raises ModelError when the model file fails its sha256 check or
    onnxruntime/tokenizers cannot load it, ValueError on bad arguments.
    ``encode`` may be called from several threads (onnxruntime sessions and
    the tokenizer are safe to share; building a light session is locked).
    """

    def __init__(self, info: ModelInfo, threads: int = 0, max_tokens: int = 256, batch_size: int = 8,
                 batch_tokens: int = 1024):
        if not MIN_TOKENS <= max_tokens <= MAX_TOKENS:
            raise ValueError(f"max_tokens must be between {MIN_TOKENS} and {MAX_TOKENS}, got {max_tokens}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if threads < 0:
            raise ValueError(f"threads must be >= 0, got {threads}")
        if batch_tokens < 0:
            raise ValueError(f"batch_tokens must be >= 0, got {batch_tokens}")
        self.info = info
        self.dim = info.dim
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.threads = threads or default_threads()
        self._sessions_lock = threading.Lock()
        session = self._build_session(self.threads)
        self._sessions = {self.threads: session}

        inputs = {i.name for i in session.get_inputs()}
        for needed in ("input_ids", "attention_mask"):
            if needed not in inputs:
                raise ModelError(f"{info.path} has no input {needed!r} (inputs: {sorted(inputs)})")
        unknown = inputs - {"input_ids", "attention_mask", "token_type_ids"}
        if unknown:
            raise ModelError(f"{info.path} wants inputs cogd does not provide: {sorted(unknown)}")
        self._token_types = "token_type_ids" in inputs
        outputs = session.get_outputs()
        by_name = {o.name: o for o in outputs}
        output = by_name.get("last_hidden_state") or by_name.get("token_embeddings") or outputs[0]
        self._output = output.name
        self._pooled = len(output.shape) == 2  # already (batch, dim): no pooling needed
        if len(output.shape) not in (2, 3):
            raise ModelError(f"{info.path}: output {output.name} has shape {output.shape}, "
                             "expected (batch, sequence, dim) or (batch, dim)")
        last = output.shape[-1]
        if isinstance(last, int) and last != info.dim:
            raise ModelError(f"{info.path}: output size {last} differs from the model's dim {info.dim}")

        try:
            self._tokenizer, self._pad_id = shared_tokenizer(info.tokenizer_path)
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise ModelError(f"cannot load tokenizer {info.tokenizer_path}: {exc}") from exc
        # Whatever the file says (all-MiniLM's: truncate and pad to 128) is replaced by cogd's
        # cap (truncated(), per text) and by padding done here, per batch, after sorting by length.

    def _build_session(self, threads: int):
        """An onnxruntime session over the verified model bytes with ``threads`` intra-op threads."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Idle pool threads would otherwise spin for a while after every run,
        # burning a core that the editor and the agent need more.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # Memory patterns are planned and kept per input shape; with a new
        # (batch, length) shape nearly every call they only add memory
        # (measured: RSS 560 MB with them, 430 MB without, same speed). The
        # CPU arena stays on: without it peaks were higher (820 MB) and
        # throughput 25% lower.
        options.enable_mem_pattern = False
        options.log_severity_level = 3  # errors only
        if _shared_arena():  # the main and the light session draw on one arena
            options.add_session_config_entry("session.use_env_allocators", "1")
        data = read_verified(self.info)  # the exact bytes that passed the sha256 check
        try:
            return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own exception types
            raise ModelError(f"onnxruntime cannot load {self.info.path}: {exc}") from exc

    def session_for(self, threads: int | None = None):
        """The session with ``threads`` intra-op threads (None or 0: the main one), built on first use.

        Building one takes about as long as the encoder's own load (0.2–0.5 s)
        and holds a second copy of the weights; call it ahead of time (e.g.
        ``session_for(1)`` at start) to keep that off a latency path.
        Raises ValueError for a negative count, ModelError like the constructor.
        """
        if threads is None or threads == 0:
            threads = self.threads
        if threads < 0:
            raise ValueError(f"threads must be >= 0, got {threads}")
        session = self._sessions.get(threads)
        if session is None:
            with self._sessions_lock:
                session = self._sessions.get(threads)
                if session is None:
                    session = self._build_session(threads)
                    self._sessions[threads] = session
        return session

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Indices into ``lengths`` (token counts) grouped into batches, shortest texts first."""
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            # Sorted ascending: the text being added is the longest of its batch.
            too_many = len(current) >= self.batch_size
            too_big = self.batch_tokens and current and (len(current) + 1) * lengths[i] > self.batch_tokens
            if current and (too_many or too_big):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _run(self, session, encodings: list[list[int]]) -> np.ndarray:
        """One inference call over tokenised texts (token id lists) → (len(encodings), dim) float32, unit rows."""
        width = max(len(e) for e in encodings)
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            n = len(enc)
            ids[row, :n] = enc
            mask[row, :n] = 1
        feed = {"input_ids": ids, "attention_mask": mask}
        if self._token_types:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = session.run([self._output], feed)[0]
        if self._pooled:
            vectors = hidden.astype(np.float32, copy=False)
        else:
            weights = mask.astype(np.float32)
            summed = np.einsum("bsd,bs->bd", hidden, weights)
            vectors = summed / np.maximum(weights.sum(axis=1, keepdims=True), 1.0)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """The model's input ids of each text, ``[CLS] … [SEP]``, at most ``max_tokens`` (unpadded).
        ``texts`` must be valid Unicode (``encode`` cleans lone surrogates first)."""
        return [truncated(e.ids, self.max_tokens, True) for e in self._tokenizer.encode_batch(texts)]

    def encode(self, texts: list[str], *, threads: int | Callable[[], int | None] | None = None) -> np.ndarray:
        """Embed ``texts``; returns float32 of shape (len(texts), dim), row i for texts[i].

        Each row has L2 norm 1 (cosine similarity is a dot product). Texts
        are cut at ``max_tokens`` tokens. An empty list gives shape (0, dim);
        an empty string gets the vector of ``[CLS] [SEP]``; lone surrogates
        are replaced, not rejected. Raises TypeError for a non-str item.

        ``threads``: None → the main session (``self.threads`` threads); an
        int → the session with that many intra-op threads (see
        :meth:`session_for`); a function → called before every batch, its
        answer (int or None) picks the session for that batch, so a caller
        can go light between two batches of one call. The vectors do not
        depend on the thread count beyond float rounding (cosine > 0.9999).
        """
        clean = [_clean(t) for t in texts]
        out = np.empty((len(clean), self.dim), dtype=np.float32)
        if not clean:
            return out
        encodings = self.token_ids(clean)
        for batch in self._batches([len(e) for e in encodings]):
            wanted = threads() if callable(threads) else threads
            out[batch] = self._run(self.session_for(wanted), [encodings[i] for i in batch])
        return out

    def encode_query(self, text: str, *, threads: int | None = None) -> np.ndarray:
        """Embed one text (a search query); float32 of shape (dim,), L2 norm 1. ``threads`` as in :meth:`encode`."""
        return self.encode([text], threads=threads)[0]


class StaticEncoder:
    """Texts → float32 unit vectors of ``info.dim`` with a static table (:mod:`cogd.embed.static`,
    :mod:`cogd.embed.static_table`): no onnxruntime.

    ``info``: a :class:`~cogd.embed.model.ModelInfo` whose ``path`` is the verified table:
    a float32 ``.npy`` (the distilled table, a trained one in ``embed.model_dir``) or the
    shipped int8 ``.npz`` with a scale per row (kept int8 in memory: 7.8 MB at 30,522 × 256
    instead of 31 MB). ``max_tokens``: at most this many WordPiece tokens of a text are
    averaged (special tokens are not added); an ``.npz`` table's own ``max_tokens`` (the cap it
    was trained with) wins. The vector of a text is the mean of its tokens' rows (the SIF
    weights or the trained sizes are in the rows), L2-normalised; a text with no known token
    gets the zero vector. Same calling convention as :class:`Encoder`
    (``encode``, ``encode_query``, ``session_for``; ``threads`` is accepted
    and ignored). Raises ModelError when the table fails its sha256 check or
    is not a 2-D table with one row per vocabulary id.
    """

    def __init__(self, info, max_tokens: int = 512, **_ignored):
        from cogd.embed.static_table import TableError, load_array, read_table

        data = read_verified(info)  # the exact bytes that passed the sha256 check
        scales = None
        try:
            if Path(info.path).suffix == ".npz":
                table, scales, max_tokens = read_table(data)
            else:
                table = load_array(data)
        except (ValueError, OSError, TableError) as exc:
            raise ModelError(f"cannot read the static model {info.path}: {exc}") from exc
        tokenizer, _pad = shared_tokenizer(info.tokenizer_path)  # the transformer's too (same file)
        if table.ndim != 2 or table.dtype != (np.int8 if scales is not None else np.float32) \
                or table.shape[0] != tokenizer.get_vocab_size() or table.shape[1] != info.dim:
            raise ModelError(f"the static model {info.path} has shape {table.shape} ({table.dtype}), expected "
                             f"({tokenizer.get_vocab_size()}, {info.dim}) float32, or int8 with scales")
        self._tokenizer = tokenizer  # untruncated: encode() cuts each text at max_tokens
        self._table = table
        self._scales = scales
        self.info = info
        self.dim = info.dim
        self.max_tokens = max_tokens
        self.threads = 1

    def session_for(self, threads: int | None = None) -> None:
        """No sessions here (the transformer's light mode has nothing to do); returns None."""
        return None

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """The table rows each text averages: its WordPiece ids without special tokens, at most
        ``max_tokens``. ``texts`` must be valid Unicode (``encode`` cleans lone surrogates first)."""
        return [truncated(e.ids, self.max_tokens, False)
                for e in self._tokenizer.encode_batch(texts, add_special_tokens=False)]

    def encode(self, texts: list[str], *, threads=None) -> np.ndarray:
        """Embed ``texts``: float32 (len(texts), dim), row i for texts[i], L2 norm 1 (0 for no tokens).

        The token rows are gathered :data:`GATHER_TOKENS` at a time (whole texts), so a call's
        scratch memory is bounded (``GATHER_TOKENS × dim × 4`` bytes) however many texts it
        gets. Lone surrogates are replaced; raises TypeError for a non-str item.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self.token_ids([_clean(t) for t in texts])
        lengths = np.array([len(e) for e in encodings], dtype=np.int64)
        ends = np.cumsum(lengths)
        first = 0
        while first < len(texts):
            # whole texts up to GATHER_TOKENS tokens (at least one text)
            base = ends[first] - lengths[first]
            last = max(int(np.searchsorted(ends, base + GATHER_TOKENS, side="right")), first + 1)
            part = lengths[first:last]
            if part.sum():
                ids = np.fromiter((i for e in encodings[first:last] for i in e), dtype=np.int64,
                                  count=int(part.sum()))
                rows = self._table[ids].astype(np.float32)
                if self._scales is not None:
                    rows *= self._scales[ids, None]
                have = part > 0
                starts = np.concatenate([[0], np.cumsum(part)[:-1]])[have]
                sums = np.zeros((len(part), self.dim), dtype=np.float32)
                sums[have] = np.add.reduceat(rows, starts, axis=0)
                norms = np.linalg.norm(sums, axis=1, keepdims=True)
                out[first:last] = sums / np.maximum(norms, 1e-12)
            first = last
        return out

    def encode_query(self, text: str, *, threads=None) -> np.ndarray:
        """Embed one text: float32 (dim,), L2 norm 1."""
        return self.encode([text])[0]


def load_encoder(info: ModelInfo, threads: int = 0, max_tokens: int = 256, batch_size: int = 8,
                 batch_tokens: int = 1024):
    """The encoder for ``info``: a :class:`cogd.embed.static.StaticEncoder` for a static table
    (``info.source == "static"``; no onnxruntime, ``max_tokens`` ignored: a static table has no
    position limit, the text's own cap applies), else an :class:`Encoder` with these arguments.
    Raises ModelError / ValueError like the constructors."""
    if info.source == "static":
        return StaticEncoder(info)
    return Encoder(info, threads, max_tokens, batch_size, batch_tokens)
