"""The secret scanner: one module finds credentials in text and masks them, for every path that stores text.

Who calls it: every memory write (:mod:`cogd.memory.api` — refused when a field holds
a secret; a hand-edited record file is rewritten with the secret masked), the ledger
(:mod:`cogd.usage.ledger` — prompt heads, query associations, tool-use and session
fields are stored masked), and the daemon's log handler (:class:`MaskingLogFilter`).

Two detectors run on a text:

1. **cogd's own rules** (:data:`RULES`), for the key families in use today, each
   with the exact span of the secret so it can be masked: PEM private key blocks
   (RSA, EC, DSA, OPENSSH, PKCS#8, encrypted, PGP; multi-line, or with literal
   ``\\n`` as in a service-account JSON; an unterminated block is masked to the end),
   PuTTY key files, GitHub classic (``ghp_ gho_ ghu_ ghs_ ghr_``) and fine-grained
   (``github_pat_``) tokens, Anthropic (``sk-ant-…``), OpenAI (``sk-proj-…``,
   ``sk-svcacct-…``, ``sk-admin-…``, legacy ``sk-…``), Slack tokens (``xox[abposr]-``,
   ``xapp-``) and webhooks, Stripe (``sk_live_``, ``sk_test_``, ``rk_live_``,
   ``rk_test_``, ``whsec_``), Google API keys (``AIza…``), AWS access key ids and
   secret keys, JWTs, passwords in URLs (``scheme://user:pass@host``),
   ``Authorization:``/``Bearer`` headers, secret-named assignments
   (``password=``, ``passwd:``, ``secret=``, ``token=``, ``api_key:`` …) and any
   assignment of a long high-entropy value;
2. **detect-secrets 1.5.0's pattern plugins** (:data:`DS_PLUGINS`) as a second net
   for the families cogd has no rule of its own for (GitLab, npm, PyPI, SendGrid,
   Twilio, Azure storage, Discord, Telegram, Mailchimp, Square, Artifactory, IBM,
   SoftLayer, Cloudant) and for anything its AWS/GitHub/Slack/Stripe/JWT/keyword
   plugins see that the rules above missed. Its two generic entropy plugins and the
   public-IP plugin are left out (on prose they flag ordinary words), and its plugins
   are called directly (``analyze_string``): ``scan_line``, its ad-hoc string API,
   clears its filter cache on every call, which made a 20 KB paste cost ~50 ms, and
   its filters and verifiers (network calls) are never wanted here. Each plugin sees
   only the lines its gate (:data:`DS_GATES`: literals its patterns need, found with
   ``str.find``, and the length of token run its secrets have) lets through.

Cost (``python scripts/secret_scan_speed.py``, a busy 2-core machine): ~0.05 ms for a
200-character prompt, ~2–4 ms for a 20 KB pasted traceback; loading detect-secrets
costs ~0.6 s once per process (the daemon does it on a thread at start:
:func:`warm_secret_scan`).

A secret is masked as at most 4 of its first characters (never more than a quarter
of it), ``…`` and ``[secret:<kind>]``: ``AKIA…[secret:aws_access_key]``. A masked
text scans clean, so masking is idempotent. Findings never carry the secret itself.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
import re
from dataclasses import dataclass

PREVIEW_CHARS = 4
MARK_PREFIX = "[secret:"

_PRIVATE = re.compile(r"<private>.*?(?:</private>|\Z)", re.IGNORECASE | re.DOTALL)
_MASK = re.compile(r"…\[secret:[a-z0-9_]+\]")


@dataclass(frozen=True)
class Finding:
    """One secret in a scanned text. ``start``/``end``: character offsets of the secret
    (``text[start:end]``); ``line``: 1-based line of ``start``; ``kind``: a stable slug
    such as ``aws_access_key``; ``preview``: at most :data:`PREVIEW_CHARS` characters, then ``…``."""

    kind: str
    start: int
    end: int
    line: int
    preview: str

    def as_dict(self) -> dict:
        """JSON-safe, without offsets: ``{"kind", "line", "preview"}``."""
        return {"kind": self.kind, "line": self.line, "preview": self.preview}


def strip_private(text: str) -> str:
    """``text`` without any ``<private>…</private>`` span (an unclosed tag runs to the end)."""
    if "<" not in text:
        return text
    return _PRIVATE.sub("", text)


def shannon_entropy(value: str) -> float:
    """Bits per character of ``value``'s own character distribution (0.0 for ""); Shannon (1948)."""
    if not value:
        return 0.0
    counts: dict[str, int] = {}
    for c in value:
        counts[c] = counts.get(c, 0) + 1
    n = len(value)
    return -sum(k / n * math.log2(k / n) for k in counts.values())


def _keep(value: str) -> int:
    """How many leading characters of a secret survive masking: at most 4, at most a quarter of it."""
    return min(PREVIEW_CHARS, len(value) // 4)


def _preview(value: str) -> str:
    return value[:_keep(value)] + "…"


# ---- value judgements -------------------------------------------------------------------------------
_PLACEHOLDER = re.compile(
    r"(?i)^(?:<[^>]*>?|\$\{?[\w.:-]*\}?|\{\{.*\}\}|%\(?\w*\)?s|%\w+%|x{3,}|\*{3,}|\.{3,}|_+|-+|"
    r"changeme|change_me|redacted|none|null|nil|true|false|undefined|required|optional|example|"
    r"your[_-]?\w*|my[_-]?(?:password|secret|token|key)|placeholder|dummy|fake|test|secret|password|token|"
    r"\w*here|string|str|bytes|int|bool)$")
_CODE_VALUE = re.compile(r"^(?:[A-Za-z_]\w*\s*(?:\.|\(|\[|::|->)|[A-Za-z_]\w*_\w*$|[a-z]+(?:[A-Z][a-z]+)+$)")
_PATH_VALUE = re.compile(r"^(?:~|\.{1,2})?/[\w.@-]+(?:/[\w.@-]+)+/?$")


_FORMAT = re.compile(r"%[-#0 +]*\d*[sdifrx]|%\(")
_WORDS = re.compile(r"[A-Za-z]+(?:[ _.-][A-Za-z]+)*")
_CAMEL = re.compile(r"[A-Z]?[a-z]+(?:[A-Z][a-z]+)*|[A-Z]+")


def _random_case(value: str) -> bool:
    """Letters only, yet a jumble of cases (``kQmZxLpWvYbnT``), not camelCase or ALLCAPS words."""
    return (len(value) >= 10 and any(c.isupper() for c in value) and any(c.islower() for c in value)
            and not _CAMEL.fullmatch(value) and shannon_entropy(value) >= 3.5)


def _looks_secret(value: str, quoted: bool = False, words_ok: bool = False) -> bool:
    """Whether the value of a secret-named assignment is a credential rather than code, a label or a
    placeholder. ``quoted``: it stood in quotes (so it is a literal, not an expression); ``words_ok``:
    the name says password/secret, so plain words are a passphrase rather than a label."""
    value = value.strip()
    if MARK_PREFIX in value or len(value) < 6 or _PLACEHOLDER.match(value):
        return False
    if "://" in value or _PATH_VALUE.match(value):
        return False  # a URL (its password, if any, is the URL rule's) or a file path
    if ("{" in value and "}" in value) or _FORMAT.search(value) or value[0] in "[{(":
        return False  # a template, a format string, a literal list or call
    if all(c.isdigit() or c in ".:-" for c in value) and (len(value) < 12 or not value.isdigit()):
        return False  # a port, a count, a version, an OID, a date
    if not quoted and _CODE_VALUE.match(value):
        return False  # an expression: self.token, get_password(), os.environ["X"], user_token
    if value.isidentifier() or (quoted and _WORDS.fullmatch(value)):
        # a bare name (a variable, a constant) or words (a label): only with digits in it, or a jumble
        # of cases, does it look like a credential — unless the name promised a passphrase
        if any(c.isdigit() for c in value):
            return len(value) >= 8
        return _random_case(value) or (words_ok and quoted and len(value) >= 8)
    has_other = any(not c.isalpha() for c in value)
    return has_other or shannon_entropy(value) >= 3.0


def _mixed(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _random_looking(value: str, min_entropy: float = 3.0) -> bool:
    """Token bodies (after a known prefix): letters and digits mixed, not a repeated or sequential filler."""
    return _mixed(value) and shannon_entropy(value) >= min_entropy


# ---- cogd's own rules -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    """A family. Each occurrence of a ``needle`` (found with ``str.find``: far cheaper than letting a
    regex look for its own start; in the lowercased text when ``fold``) is tried with ``pattern``
    *at that place* (``match``); the ``v`` group is the secret. ``bounded``: the needle must start a
    token (no letter, digit or ``_`` before it). ``check(value)`` must accept the value."""

    kind: str
    needles: tuple[str, ...]
    pattern: re.Pattern
    check: object = None
    fold: bool = False
    bounded: bool = True


_E = r"(?![A-Za-z0-9_])"  # the token ends here


def _header_value(value: str) -> bool:
    return MARK_PREFIX not in value and _mixed(value) and not _CODE_VALUE.match(value)


RULES: tuple[Rule, ...] = (
    Rule("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), re.compile(r"(?P<v>gh[pousr]_[A-Za-z0-9]{16,251})" + _E)),
    Rule("github_token", ("github_pat_",), re.compile(r"(?P<v>github_pat_[A-Za-z0-9_]{16,255})" + _E)),
    Rule("anthropic_key", ("sk-ant-",), re.compile(r"(?P<v>sk-ant-[A-Za-z0-9_-]{16,300})")),
    Rule("openai_key", ("sk-proj-", "sk-svcacct-", "sk-admin-", "sk-None-"),
         re.compile(r"(?P<v>sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,300})")),
    Rule("openai_key", ("sk-",), re.compile(r"(?P<v>sk-[A-Za-z0-9]{32,200})" + _E),
         lambda v: _random_looking(v[3:], 3.5)),
    Rule("slack_token", ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xapp-"),
         re.compile(r"(?P<v>(?:xox[abposr]|xapp)-(?:[A-Za-z0-9]+-){1,4}[A-Za-z0-9]{6,})" + _E)),
    Rule("slack_webhook", ("hooks.slack.com/",),
         re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9_/-]{16,200})"), bounded=False),
    Rule("stripe_key", ("sk_live_", "rk_live_", "sk_test_", "rk_test_"),
         re.compile(r"(?P<v>[sr]k_(?:live|test)_[A-Za-z0-9]{16,255})" + _E)),
    Rule("stripe_key", ("whsec_",), re.compile(r"(?P<v>whsec_[A-Za-z0-9]{24,255})" + _E)),
    Rule("google_api_key", ("AIza",), re.compile(r"(?P<v>AIza[0-9A-Za-z_-]{35})" + _E)),
    Rule("aws_access_key", ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
         re.compile(r"(?P<v>(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16})" + _E)),
    Rule("jwt", ("eyJ",), re.compile(r"(?P<v>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{4,}(?:\.[A-Za-z0-9_-]*)?)")),
    Rule("url_password", ("://",),
         re.compile(r"://[^\s:/?#@'\"<>]{1,256}:(?P<v>[^\s/?#@'\"<>]{1,256})@(?=[A-Za-z0-9\[.-])"),
         lambda v: MARK_PREFIX not in v and not _PLACEHOLDER.match(v), bounded=False),
    Rule("authorization_header", ("authorization",),
         re.compile(r"(?i)authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|digest)\s+)?"
                    r"(?P<v>[A-Za-z0-9._~+/-]{8,}=*)"),
         lambda v: MARK_PREFIX not in v and not _PLACEHOLDER.match(v) and not _CODE_VALUE.match(v)
         and not (v.isidentifier() and not any(c.isdigit() for c in v)) and not _WORDS.fullmatch(v), fold=True),
    Rule("authorization_header", ("bearer",), re.compile(r"(?i)bearer\s+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)"),
         _header_value, fold=True),
    Rule("authorization_header", ("token ",), re.compile(r"(?i)token\s+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)"),
         _header_value, fold=True),
)

_PEM_BEGIN = re.compile(r"-----BEGIN (?P<label>(?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----")
_PUTTY = re.compile(r"PuTTY-User-Key-File-\d+:")
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+])(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])")
_ASSIGN_VALUE = re.compile(r"(?:=>|[:=])\s{0,3}[\"'`]?(?P<v>[A-Za-z0-9+/_=.-]{20,})")
_KEYWORDS = ("pass", "pwd", "secret", "token", "key", "auth", "credential", "contrase")
_NAME_REST = re.compile(r"[\w.-]{0,60}")
_ASSIGN_AFTER = re.compile(
    r"[\"'\]]{0,2}\s{0,3}(?::=|=>|==|=|:)\s{0,3}"
    r"(?:(?P<q>[\"'`])(?P<qv>[^\"'`\n]{1,300})(?P=q)|(?P<v>[^\s\"'`,;)\]}]{1,300}))")
_NAME_CHARS = re.compile(r"[\w.-]")
_AFTER_NAME = frozenset("\"']:= \t")
_SAID_IS = re.compile(r"\s+(?:is|was)\s+[\"'`]?(?P<v>[^\s\"'`]{6,100})")
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:pass(?:word|wd|phrase)?|pwd|secret|token|auth|credentials?|contrase(?:n|ñ)a)(?:_|$)|"
    # run together with a prefix, as environment variables often are: PGPASSWORD, CLIENTSECRET, NPMTOKEN
    r"[a-z0-9](?:password|passwd|secret|token)(?:_|$)|"
    r"(?:api|access|private|priv|secret|client|auth|signing|encryption|master|account|service|db|database)_?key(?:_|$)|"
    r"apikey|accesskey|secretkey|privatekey")
# A secret word qualified into something else: ``token_type``, ``auth_header``, ``secret_name``.
_NOT_A_VALUE_NAME = re.compile(
    r"_(?:type|kind|name|names|label|field|header|hdr|method|mode|url|uri|endpoint|path|file|dir|len|length|"
    r"count|size|ttl|expiry|expires|prefix|format|class|pattern|regex|policy|version|scope|scopes|env|var|"
    r"range|index|id_field|param|column|attr|key_name)$")
_PASSPHRASE_NAME = re.compile(r"(?:^|_)(?:pass(?:word|wd|phrase)?|pwd|secret)(?:_|$)")
_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}$")  # Crockford base32: memory ids, not credentials
_ASCII_LOWER = {c: c + 32 for c in range(65, 91)}


def _positions(haystack: str, needle: str):
    """Every offset of ``needle`` in ``haystack`` (``str.find`` is a fast C search)."""
    at = haystack.find(needle)
    while at >= 0:
        yield at
        at = haystack.find(needle, at + 1)


def _lower(text: str) -> str:
    """``text`` lowercased with the same length (so offsets stay valid): ``str.lower`` changes the
    length of a few characters (``İ``), then only ASCII letters are folded."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def _rule_spans(text: str, lowered: str) -> list[tuple[str, int, int]]:
    spans = []
    for rule in RULES:
        haystack = lowered if rule.fold else text
        for needle in rule.needles:
            for at in _positions(haystack, needle):
                if rule.bounded and at and (text[at - 1].isalnum() or text[at - 1] == "_"):
                    continue
                match = rule.pattern.match(text, at)
                if match is None:
                    continue
                value = match.group("v")
                if rule.check is not None and not rule.check(value):
                    continue
                spans.append((rule.kind, match.start("v"), match.end("v")))
    return spans


def _snake(name: str) -> str:
    """``AwsSecretKey``/``aws-secret.key`` → ``aws_secret_key`` (for matching secret-ish words)."""
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return re.sub(r"[.\-]+", "_", name).lower().strip("_")


def _trim_layout(text: str, start: int, stop: int) -> tuple[int, int]:
    """Shrink a key body's span past the line breaks around it (real ones, or ``\\n`` inside JSON)."""
    while start < stop:
        if text[start] in " \t\r\n":
            start += 1
        elif text.startswith("\\n", start):
            start += 2
        else:
            break
    while stop > start:
        if text[stop - 1] in " \t\r\n":
            stop -= 1
        elif text.startswith("\\n", stop - 2):
            stop -= 2
        else:
            break
    return start, stop


def _pem_spans(text: str) -> list[tuple[str, int, int]]:
    """Private key bodies: from after the BEGIN line to the END marker (or the end of the text)."""
    spans = []
    for match in _PEM_BEGIN.finditer(text):
        if spans and match.start() < spans[-1][2]:
            continue
        end_marker = f"-----END {match.group('label')}-----"
        stop = text.find(end_marker, match.end())
        if stop < 0:
            stop = text.find("-----END ", match.end())
        start, stop = match.end(), stop if stop >= 0 else len(text)
        start, stop = _trim_layout(text, start, stop)
        spans.append(("private_key", start, stop))
    for match in _PUTTY.finditer(text):
        mac = text.find("Private-MAC:", match.end())
        if mac >= 0:
            line_end = text.find("\n", mac)
            stop = len(text) if line_end < 0 else line_end
        else:
            stop = len(text)
        spans.append(("private_key", match.end(), stop))
    return spans


def _keyword_spans(text: str, lowered: str) -> list[tuple[str, int, int]]:
    """``password = …``, ``api_key: …``, ``"client_secret": "…"``: a secret-named name and a credential value."""
    spans = []
    done = -1  # the end of the last name looked at (a name with two secret words is looked at once)
    for word in _KEYWORDS:
        for at in _positions(lowered, word):
            if at < done:
                continue
            end = _NAME_REST.match(text, at + len(word)).end()
            if text[end:end + 1] not in _AFTER_NAME:
                continue  # ``key,`` ``token)`` … : no assignment follows (most hits in code)
            assign = _ASSIGN_AFTER.match(text, end)
            if assign is None:
                said = _SAID_IS.match(text, end)  # "the db password is Hunter2!": in prose, stricter
                if said is not None and _PASSPHRASE_NAME.search(_snake(text[at:end])):
                    value = said.group("v").rstrip(".,;")
                    if _looks_secret(value) and _mixed(value):
                        spans.append(("secret_assignment", said.start("v"), said.start("v") + len(value)))
                continue
            start = at
            while start > 0 and at - start < 60 and _NAME_CHARS.match(text, start - 1):
                start -= 1
            name = _snake(text[start:end])
            if not _SECRET_NAME.search(name) or _NOT_A_VALUE_NAME.search(name):
                continue
            if assign.group("qv") is not None:
                value, v_start = assign.group("qv"), assign.start("qv")
                passphrase = bool(_PASSPHRASE_NAME.search(name))
                if " " in value.strip() and (not passphrase or len(value) > 100):
                    continue
                if not _looks_secret(value, True, words_ok=passphrase):
                    continue
            else:
                value, v_start = assign.group("v"), assign.start("v")
                value = value.rstrip(".:,;!?")  # a sentence's or a statement's punctuation
                if not _looks_secret(value):
                    continue
            spans.append(("secret_assignment", v_start, v_start + len(value)))
    return spans


def _entropy_spans(text: str) -> list[tuple[str, int, int]]:
    """``name = <20+ characters of mixed letters and digits with ≥ 4.2 bits/char>`` (any name)."""
    spans = []
    for op in (":", "="):
        for at in _positions(text, op):
            match = _ASSIGN_VALUE.match(text, at)
            if match is None:
                continue
            value = match.group("v")
            if MARK_PREFIX in value or value.startswith("//") or _ULID.match(value):
                continue  # masked already, the rest of a URL (``https://…``), or a record id
            before = at - 1
            if before < 0 or not (text[before].isalnum() or text[before] in "_]\"' \t="):
                continue  # ``name=`` / ``"name":``; not a bare ``:`` starting a line
            if _mixed(value) and shannon_entropy(value) >= 4.2 and _token_like(value) and not _sequential(value):
                spans.append(("high_entropy_assignment", match.start("v"), match.end("v")))
    return spans


_RUNS = ("abcdefghijklmnopqrstuvwxyz", "0123456789", "qwertyuiopasdfghjklzxcvbnm")


def _sequential(value: str) -> bool:
    """An alphabet or keyboard row written out (``"abcdefghijklmnopqrstuvwxyz0123456789_"``): a charset, not a key."""
    low = value.lower()
    return any(run[i:i + 6] in low for run in _RUNS for i in range(len(run) - 5))


def _token_like(value: str) -> bool:
    """Random rather than words joined by separators (``sentence-transformers/all-MiniLM-L6-v2``): its
    longest separator-free run is at least 12 characters and mixes digits with letters or both cases."""
    longest = max(re.split(r"[-_/.+=]", value), key=len)
    if len(longest) < 12 or all(c in "0123456789abcdefABCDEF" for c in longest):
        return False  # short pieces, or a hex digest (a commit, a checksum)
    cases = any(c.isupper() for c in longest) and any(c.islower() for c in longest)
    return (_mixed(longest) or cases) and shannon_entropy(longest) >= 3.5


def _windows(lowered: str, words: tuple[str, ...], before: int, after: int) -> list[tuple[int, int]]:
    """Merged ``[start, end)`` windows around every occurrence of ``words`` in ``lowered``."""
    places = sorted(at for word in words for at in _positions(lowered, word))
    windows: list[list[int]] = []
    for at in places:
        start, end = max(0, at - before), min(len(lowered), at + after)
        if windows and start <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], end)
        else:
            windows.append([start, end])
    return [(s, e) for s, e in windows]


def _aws_secret_spans(text: str, lowered: str) -> list[tuple[str, int, int]]:
    """40-character AWS secret access keys within 240 characters after an AWS word or key id (a bare
    40-character string is not enough: it could be any base64)."""
    spans = []
    for start, end in _windows(lowered, ("aws", "akia", "asia", "secret"), 0, 240):
        for match in _AWS_SECRET.finditer(text, start, end):
            value = match.group("v")
            if match.end() < len(text) and (text[match.end()].isalnum() or text[match.end()] in "/+="):
                continue  # the window cut a longer string
            if (any(c.isupper() for c in value) and any(c.islower() for c in value)
                    and any(c.isdigit() for c in value) and shannon_entropy(value) >= 4.0):
                spans.append(("aws_secret_key", match.start("v"), match.end("v")))
    return spans


# ---- detect-secrets, the second net ---------------------------------------------------------------------
DS_PLUGINS = (
    "ArtifactoryDetector", "AWSKeyDetector", "AzureStorageKeyDetector", "BasicAuthDetector",
    "CloudantDetector", "DiscordBotTokenDetector", "GitHubTokenDetector", "GitLabTokenDetector",
    "IbmCloudIamDetector", "IbmCosHmacDetector", "JwtTokenDetector", "KeywordDetector", "MailchimpDetector",
    "NpmDetector", "OpenAIDetector", "PrivateKeyDetector", "PypiTokenDetector", "SendGridDetector",
    "SlackDetector", "SoftlayerDetector", "SquareOAuthDetector", "StripeDetector",
    "TelegramBotTokenDetector", "TwilioKeyDetector",
)
# Each plugin runs on a line only when the line holds a literal its patterns need (found with
# ``str.find``; ``fold``: in the lowercased text; None: any line), and — for plugins whose secrets are
# long tokens — a run of at least ``min_run`` token characters, and passes ``line_test`` when given.
# Running all 24 plugins on every line that holds a common word like "key" cost ~0.1 ms a line.
DS_GATES: dict[str, tuple["tuple[str, ...] | None", bool, int, "re.Pattern | None"]] = {
    "ArtifactoryDetector": (("AKC", "AP"), False, 0, re.compile(r"A(?:KC|P[0-9A-F])[A-Za-z0-9]{8}")),
    "AWSKeyDetector": (("akia", "asia", "abia", "acca", "a3t", "aws"), True, 0, None),
    "AzureStorageKeyDetector": (("accountkey=",), True, 0, None),
    "BasicAuthDetector": (("://",), False, 0, None),
    "CloudantDetector": (("cl",), True, 24, None),
    "DiscordBotTokenDetector": (None, False, 23, re.compile(r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.")),
    "GitHubTokenDetector": (("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), False, 0, None),
    "GitLabTokenDetector": (("gl", "GR1348941"), False, 20, None),
    "IbmCloudIamDetector": (("key", "pwd", "pass", "token"), True, 44, None),
    "IbmCosHmacDetector": (("secret", "access", "key"), True, 32, None),
    "JwtTokenDetector": (("eyJ",), False, 0, None),
    "KeywordDetector": (("key", "pass", "pwd", "secret", "contrase"), True, 0, re.compile(r"[\"'`]")),
    "MailchimpDetector": (("-us",), False, 32, None),
    "NpmDetector": (("_authtoken",), True, 0, None),
    "OpenAIDetector": (("T3BlbkFJ",), False, 0, None),
    "PrivateKeyDetector": (("PRIVATE KEY", "PuTTY"), False, 0, None),
    "PypiTokenDetector": (("pypi-",), False, 0, None),
    "SendGridDetector": (("SG.",), False, 0, None),
    "SlackDetector": (("xox", "hooks.slack.com"), False, 0, None),
    "SoftlayerDetector": (("softlayer", "sl"), True, 64, None),
    "SquareOAuthDetector": (("sq0csp-",), False, 0, None),
    "StripeDetector": (("k_live_",), False, 0, None),
    "TelegramBotTokenDetector": (None, False, 35, re.compile(r"[0-9]{8,10}:[0-9A-Za-z_-]{35}")),
    "TwilioKeyDetector": (("AC", "SK"), False, 32, None),
}
_TOKEN_BYTES = bytes(range(48, 58)) + bytes(range(65, 91)) + bytes(range(97, 123)) + b"_-"
_RUN_TABLE = bytes((97 if i in _TOKEN_BYTES else 32) for i in range(256))
MIN_RUN = 20


def _long_runs(text: str, line_starts: list[int]) -> dict[int, int]:
    """Line index → length of its longest run of token characters (``[A-Za-z0-9_-]``), for runs of
    at least :data:`MIN_RUN` (via ``bytes.translate``: one C pass instead of a regex's per-position tries)."""
    flat = text.encode("ascii", "replace").translate(_RUN_TABLE)  # one byte per character: offsets hold
    runs: dict[int, int] = {}
    probe = b"a" * MIN_RUN
    at = flat.find(probe)
    while at >= 0:
        end = flat.find(b" ", at)
        end = len(flat) if end < 0 else end
        index = bisect.bisect_right(line_starts, at) - 1
        runs[index] = max(runs.get(index, 0), end - at)
        at = flat.find(probe, end)
    return runs


_plugins: list | None = None


def _ds_plugins() -> list:
    """``(plugin, gate)`` for each detect-secrets plugin in :data:`DS_PLUGINS` (built once; they hold no state)."""
    global _plugins
    if _plugins is None:
        from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

        by_name = {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}
        _plugins = [(by_name[name](), DS_GATES[name]) for name in DS_PLUGINS if name in by_name]
    return _plugins


def warm_secret_scan() -> None:
    """Load detect-secrets' plugins on a background thread (its import costs ~0.6 s on a busy machine;
    the daemon calls this at start so that the first prompt does not pay it). Returns at once."""
    import threading

    threading.Thread(target=_ds_plugins, name="cogd-secrets-warm", daemon=True).start()


def _ds_kind(secret_type: str) -> str:
    return "ds_" + re.sub(r"[^a-z0-9]+", "_", secret_type.lower()).strip("_")


def _ds_spans(text: str, lowered: str, line_starts: list[int],
              pem: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """What detect-secrets' plugins find, each run only on the lines its gate (:data:`DS_GATES`) lets through."""
    spans = []
    runs = _long_runs(text, line_starts)
    lines_of: dict[tuple[str, bool], set[int]] = {}  # literal → lines holding it (shared by the plugins)
    for plugin, (literals, fold, min_run, line_test) in _ds_plugins():
        if min_run:
            long_lines = {i for i, n in runs.items() if n >= min_run}
            if not long_lines:
                continue
        if literals is None:
            lines = long_lines
        else:
            lines = set()
            for literal in literals:
                key = (literal, fold)
                if key not in lines_of:
                    haystack = lowered if fold else text
                    lines_of[key] = {bisect.bisect_right(line_starts, at) - 1 for at in _positions(haystack, literal)}
                lines |= lines_of[key]
            if min_run:
                lines &= long_lines
        for index in sorted(lines):
            start = line_starts[index]
            end = line_starts[index + 1] - 1 if index + 1 < len(line_starts) else len(text)
            line = text[start:end]
            if line_test is not None and not line_test.search(line):
                continue
            try:
                values = set(plugin.analyze_string(line))
            except Exception:  # a plugin's bug must not refuse a prompt or a memory
                continue
            for value in values:
                if not value or MARK_PREFIX in value:
                    continue
                if plugin.secret_type in ("Secret Keyword", "Basic Auth Credentials") and not _looks_secret(value, True):
                    continue
                if plugin.secret_type == "Private Key":
                    at = start + max(line.find(value), 0)
                    if not any(at <= s <= at + 200 for _, s, _ in pem):  # a block the PEM rule has not seen
                        spans.append(("private_key", at, len(text)))
                    continue
                at = line.find(value)
                while at >= 0:
                    spans.append((_ds_kind(plugin.secret_type), start + at, start + at + len(value)))
                    at = line.find(value, at + len(value))
    return spans


# ---- the scan ----------------------------------------------------------------------------------------
def _line_starts(text: str) -> list[int]:
    starts = [0]
    at = text.find("\n")
    while at >= 0:
        starts.append(at + 1)
        at = text.find("\n", at + 1)
    return starts


def _merge(spans: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Overlapping spans become one (their union), named after the earliest (then longest) of them."""
    merged: list[list] = []
    for kind, start, end in sorted(spans, key=lambda s: (s[1], -s[2])):
        if end <= start:
            continue
        if merged and start < merged[-1][2]:
            merged[-1][2] = max(merged[-1][2], end)
            if merged[-1][0].startswith("ds_") and not kind.startswith("ds_"):
                merged[-1][0] = kind  # cogd's own name for the family, when it has one
        else:
            merged.append([kind, start, end])
    return [(k, s, e) for k, s, e in merged]


def _drop_masked(spans: list[tuple[str, int, int]], text: str) -> list[tuple[str, int, int]]:
    """A span that is (part of) an existing mask is not a new secret: masking stays idempotent."""
    if MARK_PREFIX not in text:
        return spans
    marks = [(m.start(), m.end()) for m in _MASK.finditer(text)]
    kept = []
    for kind, start, end in spans:
        if any(s < end and start < e for s, e in marks):
            inside = text[start:end]
            if _MASK.sub("", inside).strip("…") == "" or len(_MASK.sub("", inside)) <= PREVIEW_CHARS:
                continue
        kept.append((kind, start, end))
    return kept


def scan(text: str) -> list[Finding]:
    """Every secret in ``text``, in order, non-overlapping (empty when clean).

    ``text``: any string (lone surrogates are tolerated). Never raises on odd input.
    Cost: see the module docstring (tens of µs for a prompt, a few ms for a 20 KB paste).
    """
    if not isinstance(text, str) or not text:
        return []
    lowered = _lower(text)
    spans = _rule_spans(text, lowered)
    pem = _pem_spans(text) if "-----BEGIN" in text or "PuTTY-User-Key" in text else []
    spans += pem
    spans += _aws_secret_spans(text, lowered)
    spans += _keyword_spans(text, lowered)
    spans += _entropy_spans(text)
    line_starts = _line_starts(text)
    spans += _ds_spans(text, lowered, line_starts, pem)
    spans = [span for span in _drop_masked(_merge(spans), text) if not _inside_ulid(text, span[1], span[2])]
    findings = []
    for kind, start, end in spans:
        line = bisect.bisect_right(line_starts, start)
        findings.append(Finding(kind, start, end, line, _preview(text[start:end])))
    return findings


_ALNUM_UPPER = frozenset("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _inside_ulid(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` lies within one whole-word ULID (a memory record's id: 26
    Crockford base32 characters, the first 0-7). Such an id is no credential, but a pattern can
    match inside it: detect-secrets' AWS key id pattern ``A3T[A-Z0-9]{16}`` matches the id
    ``01M8XYA3TW16BVC401RV8QGQQ2``, and masking it would rewrite the record's own id."""
    left, right = start, end
    while left > 0 and text[left - 1] in _ALNUM_UPPER:
        left -= 1
    while right < len(text) and text[right] in _ALNUM_UPPER:
        right += 1
    if right - left != 26 or any(text[i] not in _ALNUM_UPPER for i in range(start, end)):
        return False
    token = text[left:right]
    return token[0] in "01234567" and _ULID.match(token) is not None


def redact(text: str) -> tuple[str, list[Finding]]:
    """``(masked text, findings)``: each secret replaced by its first characters (≤ 4), ``…`` and
    ``[secret:<kind>]``; the rest of ``text`` untouched. A private key body becomes just the mark."""
    findings = scan(text)
    if not findings:
        return text, []
    out, last = [], 0
    for f in findings:
        value = text[f.start:f.end]
        keep = 0 if f.kind == "private_key" else _keep(value)
        out.append(text[last:f.start])
        out.append(f"{value[:keep]}…{MARK_PREFIX}{f.kind}]")
        last = f.end
    out.append(text[last:])
    return "".join(out), findings


# Short texts are masked through a bounded memo: a daemon masks the same session id, client name
# and ranking labels several times per request (each scan costs ~0.1 ms whatever the length).
# The scan is a pure function of the text, so a remembered answer is the answer.
MEMO_MAX_CHARS = 256
MEMO_ENTRIES = 4096


@functools.lru_cache(maxsize=MEMO_ENTRIES)
def _mask_short(text: str) -> str:
    return redact(text)[0]


def mask(text: str) -> str:
    """``text`` with every secret masked (see :func:`redact`); non-strings are returned unchanged.

    Texts of at most :data:`MEMO_MAX_CHARS` characters are answered from a memo of the last
    :data:`MEMO_ENTRIES` distinct ones (the same result, computed once)."""
    if not isinstance(text, str) or not text:
        return text
    if len(text) <= MEMO_MAX_CHARS:
        return _mask_short(text)
    return redact(text)[0]


def mask_data(value):
    """Mask every string inside a JSON/YAML-shaped value (dict keys and values, list items).

    Returns ``(masked value, findings)``; other scalars are kept as they are.
    """
    found: list[Finding] = []

    def walk(item):
        if isinstance(item, str):
            masked, hits = redact(item)
            found.extend(hits)
            return masked
        if isinstance(item, dict):
            return {walk(k) if isinstance(k, str) else k: walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(v) for v in item]
        return item

    return walk(value), found


class MaskingLogFilter(logging.Filter):
    """A log handler filter that masks secrets in the message and in the formatted traceback.

    Put on a handler (``handler.addFilter(MaskingLogFilter())``): an exception whose
    text quotes client input (an anchor id, a query) must not write a secret to the log.
    """

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
            masked = mask(message)
            if masked != message or record.args:
                record.msg, record.args = masked, None
            if record.exc_info and not record.exc_text:
                record.exc_text = mask(self._formatter.formatException(record.exc_info))
            elif record.exc_text:
                record.exc_text = mask(record.exc_text)
        except Exception:  # logging must never fail because of the mask
            pass
        return True
