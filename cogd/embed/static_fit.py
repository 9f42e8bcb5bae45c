"""Fit a static token table to a transformer's vectors of real texts (a ridge regression, numpy only).

Why: the distilled table of :mod:`cogd.embed.static` gives each token the vector the
transformer makes of that token *alone*; in a real text a token means what its
neighbours make it mean, and the distilled table's hybrid quality equals BM25's
(docs/architecture.md, "The static model and the two tiers"). Here the rows are fitted
instead, so that the mean of a text's token rows regresses the transformer's vector of that
whole text (the idea behind tokenlearn-style training of model2vec tables), on texts the
caller supplies (``scripts/train_static.py``: entity texts of the standard library).

The model: text ``t`` with token counts ``c_t,j`` (WordPiece ids, no special tokens, at
most ``max_tokens``) has the row ``a_t`` with ``a_t,j = c_t,j / sum_j c_t,j``; its predicted
vector is ``a_t W``, compared by cosine (the static encoder normalises the sum of its token
rows, the same direction). The fit minimises

    ||A W - Y B||^2 + lam ||W - W_init||^2

over the rows of the tokens that occur in at least ``min_df`` training texts (the others keep
``W_init``): ``Y`` are the transformer's unit vectors, ``B`` the top ``dim`` right singular
vectors of ``Y`` (an uncentred basis, so dot products between targets are kept), ``W_init``
the distilled table mapped into that basis by least squares. The normal equations
``(A'A + lam I) W = A'(Y B - A_fixed W_init) + lam W_init`` are solved exactly
(:func:`ridge_solve`): ``A'A`` of the free rows is built from every text's outer product with
``numpy.bincount``. Cost: ``2 free³ / 3`` flops (6,700 free rows: under a minute on one loaded
core) and twice ``8 free²`` bytes of memory (6,700: 720 MB; 20,000: 6.4 GB).
"""

from __future__ import annotations

import numpy as np

BINCOUNT_TEXTS = 2000  # texts whose outer products are summed in one bincount call (bounds memory)


def token_rows(tokenizer, texts: list[str], max_tokens: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per text: (distinct token ids int64, their counts / the text's token count float64).

    ``tokenizer``: a ``tokenizers.Tokenizer`` (its truncation is set to ``max_tokens`` here; no
    special tokens are added, as in :class:`cogd.embed.encoder.StaticEncoder`). A text with no
    token gets two empty arrays.
    """
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_tokens)
    out = []
    for enc in tokenizer.encode_batch(list(texts), add_special_tokens=False):
        ids, counts = np.unique(np.asarray(enc.ids, dtype=np.int64), return_counts=True)
        out.append((ids, counts / max(int(counts.sum()), 1)))
    return out


def mean_rows(rows: list[tuple[np.ndarray, np.ndarray]], table: np.ndarray) -> np.ndarray:
    """(len(rows), table width) float64: each text's weighted mean of its token rows (zeros if none)."""
    out = np.zeros((len(rows), table.shape[1]))
    for k, (ids, weights) in enumerate(rows):
        if len(ids):
            out[k] = weights @ table[ids]
    return out


def unit(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` (n, d) with each row scaled to norm 1 (a zero row stays zero)."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def target_basis(targets: np.ndarray, dim: int) -> np.ndarray:
    """(d, dim) float64: the top ``dim`` right singular vectors of ``targets`` (n, d), uncentred."""
    _, _, vt = np.linalg.svd(np.asarray(targets, dtype=np.float64), full_matrices=False)
    return vt[:dim].T


def mapped_init(rows, targets_b: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table`` (vocab, k) times the (k, dim) least-squares map from its text means to ``targets_b``."""
    mapping, *_ = np.linalg.lstsq(mean_rows(rows, table.astype(np.float64)), targets_b, rcond=None)
    return table.astype(np.float64) @ mapping


def free_ids(rows, vocab_size: int, min_df: int) -> np.ndarray:
    """The token ids (sorted) that occur in at least ``min_df`` of the texts ``rows``."""
    df = np.zeros(vocab_size, dtype=np.int64)
    for ids, _ in rows:
        df[ids] += 1
    return np.flatnonzero(df >= max(min_df, 1))


def normal_equations(rows, targets_b: np.ndarray, init: np.ndarray, free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``A'A`` (f, f), ``A'(Y B - A_fixed W_init)`` (f, dim)) over the ``free`` ids (f of them).

    ``rows``: :func:`token_rows` of the training texts; ``targets_b``: their targets in the basis
    (n, dim); ``init``: the starting table (vocab, dim), whose rows outside ``free`` are fixed.
    """
    f = len(free)
    pos = np.full(init.shape[0], -1, dtype=np.int64)
    pos[free] = np.arange(f)
    gram = np.zeros(f * f)
    rhs = np.zeros((f, targets_b.shape[1]))
    cells, values = [], []
    for (ids, weights), target in zip(rows, targets_b):
        p = pos[ids]
        inside = p >= 0
        fixed = weights[~inside] @ init[ids[~inside]] if (~inside).any() else 0.0
        fp, fw = p[inside], weights[inside]
        rhs[fp] += np.outer(fw, target - fixed)
        cells.append((fp[:, None] * f + fp[None, :]).ravel())
        values.append(np.outer(fw, fw).ravel())
        if len(cells) >= BINCOUNT_TEXTS:
            gram += np.bincount(np.concatenate(cells), np.concatenate(values), minlength=f * f)
            cells, values = [], []
    if cells:
        gram += np.bincount(np.concatenate(cells), np.concatenate(values), minlength=f * f)
    return gram.reshape(f, f), rhs


def ridge_solve(gram: np.ndarray, rhs: np.ndarray, init_free: np.ndarray, lam: float) -> np.ndarray:
    """The free rows (f, dim) solving ``(gram + lam I) W = rhs + lam init_free``.

    One LU factorisation (``numpy.linalg.solve``, ``2 f³ / 3`` flops): numpy has no triangular
    solver, so a Cholesky factor would cost two general solves more. ``lam`` > 0 makes the
    matrix positive definite (``gram`` is only semi-definite: a token that always occurs with
    another cannot be told apart from it). Memory: one copy of ``gram`` besides it. Raises
    ``numpy.linalg.LinAlgError`` when the matrix is singular (``lam`` 0 on a rank-deficient ``gram``).
    """
    matrix = gram.copy()
    matrix[np.diag_indices_from(matrix)] += lam
    return np.linalg.solve(matrix, rhs + lam * init_free)


def holdout_scores(rows, table: np.ndarray, targets: np.ndarray, basis: np.ndarray | None = None) -> dict:
    """How well ``table`` reproduces ``targets`` (n, d) on held-out texts ``rows``.

    ``cos``: mean cosine between a text's predicted vector and its target (in ``basis`` when
    given: the table's space). ``nn10``: the mean share of each text's ten nearest held-out
    neighbours by the table that are also among its ten nearest by the targets (the structure
    a search uses; 1 = the same neighbours).
    """
    predicted = mean_rows(rows, table.astype(np.float64))
    goal = targets @ basis if basis is not None else targets
    cos = float((unit(predicted) * unit(goal)).sum(1).mean())

    def neighbours(x: np.ndarray) -> np.ndarray:
        x = unit(x)
        sims = x @ x.T
        np.fill_diagonal(sims, -np.inf)
        return np.argsort(-sims, axis=1, kind="stable")[:, :10]

    ours, theirs = neighbours(predicted), neighbours(np.asarray(targets, dtype=np.float64))
    shared = [len(set(a) & set(b)) / 10 for a, b in zip(ours, theirs)]
    return {"cos": cos, "nn10": float(np.mean(shared)) if shared else 0.0}
