"""Turn texts into unit vectors with an ONNX sentence-embedding model on the CPU.

Pipeline per batch: WordPiece tokenisation (``tokenizers``), truncated to
``max_tokens`` tokens including ``[CLS]``/``[SEP]`` and padded to the longest
text of the batch; one onnxruntime run; mean pooling of the token vectors over
the attention mask; L2 normalisation. Texts are processed shortest first (by
characters) so that batches hold texts of similar length and little padding;
results come back in the caller's order.

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

import numpy as np

from cogd.embed.model import ModelError, ModelInfo, read_verified

MIN_TOKENS = 4  # [CLS], [SEP] and at least two tokens of text
MAX_TOKENS = 512  # the position table of BERT-family models


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

    ``threads``: onnxruntime intra-op threads; 0 → :func:`default_threads`.
    ``max_tokens``: sequence cap per text, special tokens included (4–512);
    longer texts are truncated, not split. ``batch_size``: texts per
    inference call (>= 1). Raises ModelError when the model file fails its
    sha256 check or onnxruntime/tokenizers cannot load it, ValueError on bad
    arguments. Not thread-safe: use one Encoder from one thread at a time.
    """

    def __init__(self, info: ModelInfo, threads: int = 0, max_tokens: int = 256, batch_size: int = 8):
        if not MIN_TOKENS <= max_tokens <= MAX_TOKENS:
            raise ValueError(f"max_tokens must be between {MIN_TOKENS} and {MAX_TOKENS}, got {max_tokens}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if threads < 0:
            raise ValueError(f"threads must be >= 0, got {threads}")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.info = info
        self.dim = info.dim
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.threads = threads or default_threads()

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
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
        data = read_verified(info)  # the exact bytes that passed the sha256 check
        try:
            self._session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own exception types
            raise ModelError(f"onnxruntime cannot load {info.path}: {exc}") from exc
        del data

        inputs = {i.name for i in self._session.get_inputs()}
        for needed in ("input_ids", "attention_mask"):
            if needed not in inputs:
                raise ModelError(f"{info.path} has no input {needed!r} (inputs: {sorted(inputs)})")
        unknown = inputs - {"input_ids", "attention_mask", "token_type_ids"}
        if unknown:
            raise ModelError(f"{info.path} wants inputs cogd does not provide: {sorted(unknown)}")
        self._token_types = "token_type_ids" in inputs
        outputs = self._session.get_outputs()
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
            tokenizer = Tokenizer.from_file(str(info.tokenizer_path))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise ModelError(f"cannot load tokenizer {info.tokenizer_path}: {exc}") from exc
        padding = tokenizer.padding or {}
        pad_token = padding.get("pad_token") or "[PAD]"
        pad_id = tokenizer.token_to_id(pad_token)
        if pad_id is None:
            pad_id = padding.get("pad_id", 0)
        # Replace whatever the file says (all-MiniLM's: truncate and pad to 128)
        # with cogd's cap and padding to the longest text of each batch.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=max_tokens)
        tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)
        self._tokenizer = tokenizer

    def _run(self, texts: list[str]) -> np.ndarray:
        """One inference call: ``texts`` (already clean) → (len(texts), dim) float32, unit rows."""
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": mask}
        if self._token_types:
            feed["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run([self._output], feed)[0]
        if self._pooled:
            vectors = hidden.astype(np.float32, copy=False)
        else:
            weights = mask.astype(np.float32)
            summed = np.einsum("bsd,bs->bd", hidden, weights)
            vectors = summed / np.maximum(weights.sum(axis=1, keepdims=True), 1.0)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts``; returns float32 of shape (len(texts), dim), row i for texts[i].

        Each row has L2 norm 1 (cosine similarity is a dot product). Texts
        are cut at ``max_tokens`` tokens. An empty list gives shape (0, dim);
        an empty string gets the vector of ``[CLS] [SEP]``; lone surrogates
        are replaced, not rejected. Raises TypeError for a non-str item.
        """
        clean = [_clean(t) for t in texts]
        out = np.empty((len(clean), self.dim), dtype=np.float32)
        order = sorted(range(len(clean)), key=lambda i: len(clean[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start:start + self.batch_size]
            out[chunk] = self._run([clean[i] for i in chunk])
        return out

    def encode_query(self, text: str) -> np.ndarray:
        """Embed one text (a search query); float32 of shape (dim,), L2 norm 1."""
        return self.encode([text])[0]
