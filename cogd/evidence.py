"""Evidence-weighted shrinkage: a learned signal counts in proportion to the evidence behind it.

A ranking signal learned from this repository's past (what earlier sessions used, what earlier
prompts led the agent to edit, what earlier commits touched) starts with no effect and earns its
weight as evidence accumulates, so a repository with no past ranks exactly as with learning off
and a handful of sessions cannot swing the ranking. For a source whose configured weight is
``w`` and which rests on ``n`` independent units of evidence (sessions, commits), the weight
applied is

    w_eff = w · Z,    Z = n / (n + k)

``Z`` is the *credibility factor* of Bühlmann's credibility theory (H. Bühlmann, "Experience
rating and credibility", ASTIN Bulletin 4(3), 1967): the weight the best linear estimator puts
on ``n`` observations against the collective prior, where ``k`` is the ratio of the expected
within-unit variance to the variance between units. It is also the weight a Beta–binomial
posterior mean gives the data against a Beta prior of strength ``k``: ``(k·m + s) / (k + n) =
Z · s/n + (1 − Z) · m`` (e.g. Gelman et al., *Bayesian Data Analysis*, 3rd ed., section 2.4) —
the empirical-Bayes shrinkage towards the prior that Efron and Morris (JASA 70, 1975) showed
beats the raw estimate. Here the prior is "no effect" (weight 0) and ``k`` is the prior's
strength in units of evidence: at ``n = k`` a source has half its weight, at ``n = 9k`` 90 %.

``k = 0`` switches shrinkage off (the full weight from the start, as before this module).
Standard library only: every layer may use it (the usage ledger's sources, history's).
"""

from __future__ import annotations

import math


def credibility(evidence: float, prior_strength: float) -> float:
    """``Z = n / (n + k)`` in [0, 1]: how far a source with ``n`` units of evidence is trusted.

    ``evidence`` (n) and ``prior_strength`` (k) are counts of independent units (sessions,
    commits), finite and ≥ 0. ``k = 0`` returns 1 (no shrinkage), even at ``n = 0``. Raises
    ValueError for a negative or non-finite argument.
    """
    for name, value in (("evidence", evidence), ("prior_strength", prior_strength)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if prior_strength == 0:
        return 1.0
    return evidence / (evidence + prior_strength)


def shrunk_weight(weight: float, evidence: float, prior_strength: float) -> float:
    """``weight · n / (n + k)``: a learned source's weight after shrinkage towards no effect.

    ``weight`` is the configured base weight (finite, ≥ 0; 0 stays 0); ``evidence`` and
    ``prior_strength`` as in :func:`credibility`. Raises ValueError for a negative or
    non-finite argument.
    """
    if not math.isfinite(weight) or weight < 0:
        raise ValueError(f"weight must be a finite number >= 0, got {weight!r}")
    return weight * credibility(evidence, prior_strength)


def uncovered_share(covered: float, prior_strength: float) -> float:
    """``k / (k + n)`` in (0, 1]: the share of a source's evidence another source does not already hold.

    For a session source (utility, session association) that re-reads the edits history has
    already mined: ``covered`` (n) is history's evidence (reachable change requests) and
    ``prior_strength`` (k) the change requests at which half of the session source's evidence
    counts as already held. It is ``1 − credibility(n, k)``: in Bühlmann's model the
    credibility ``Z`` is the weight the other source's own data has earned, so ``1 − Z`` is what
    is left for a second reading of the same data — with no history (``n = 0``) it is 1 and the
    session source keeps its weight. ``k = 0`` returns 1 (the discount off). Raises ValueError
    for a negative or non-finite argument.
    """
    credibility(covered, prior_strength)  # validates both arguments
    if prior_strength == 0:
        return 1.0
    return prior_strength / (covered + prior_strength)
