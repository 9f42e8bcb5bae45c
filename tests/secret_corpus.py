"""A corpus of FAKE credentials with the shapes of real ones (seeded, so every run builds the same).

Each entry: ``(family, text_holding_it, distinctive_middle)``. ``distinctive_middle`` is a part of
the secret well past its public prefix: a raw-byte search for it finds any stored copy, while the
≤ 4 characters a mask keeps never contain it. None of these is a real key: the bodies are random.
"""

from __future__ import annotations

import base64
import json
import random
import string

ALNUM = string.ascii_letters + string.digits
UPPER_ALNUM = string.ascii_uppercase + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    # every body mixes digits and letters (real keys of these lengths almost always do)
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(n))
        if n < 8 or (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
            return value


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(rng: random.Random) -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps({"sub": _rand(rng, LOWER_ALNUM, 12), "name": "Test User",
                                  "iat": 1700000000 + rng.randrange(10**6)}).encode())
    return f"{header}.{payload}.{_b64url(rng.randbytes(32))}"


def _pem(rng: random.Random, label: str, lines: int = 6) -> str:
    body = "\n".join(base64.b64encode(rng.randbytes(48)).decode() for _ in range(lines))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


def build(seed: int = 20261201) -> list[tuple[str, str, str]]:
    """The corpus: at least 30 entries over every family the README lists."""
    rng = random.Random(seed)
    out: list[tuple[str, str, str]] = []

    def add(family: str, text: str, secret: str, middle: str | None = None) -> None:
        assert secret in text
        mid = middle or secret[len(secret) // 3: len(secret) // 3 + 12]
        out.append((family, text, mid))

    for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"):
        token = prefix + _rand(rng, ALNUM, 36)
        add("github_token", f"export GH_TOKEN_X={token} then push", token, token[8:20])
    token = "github_pat_" + _rand(rng, ALNUM, 22) + "_" + _rand(rng, ALNUM, 59)
    add("github_token", f"fine-grained PAT {token} for the release bot", token, token[20:34])
    key = "sk-ant-api03-" + _rand(rng, URLSAFE, 93) + "AA"
    add("anthropic_key", f"ANTHROPIC_API_KEY {key}", key, key[30:44])
    key = "sk-ant-admin01-" + _rand(rng, URLSAFE, 80)
    add("anthropic_key", f"the admin key is {key}", key, key[30:44])
    key = "sk-proj-" + _rand(rng, URLSAFE, 120)
    add("openai_key", f"client = OpenAI(api_key='{key}')", key, key[40:54])
    key = "sk-" + _rand(rng, ALNUM, 48)
    add("openai_key", f"old style openai key {key} still works", key, key[20:34])
    key = "sk-" + _rand(rng, ALNUM, 20) + "T3BlbkFJ" + _rand(rng, ALNUM, 20)
    add("openai_key", f"legacy {key}", key, key[5:19])
    token = f"xoxb-{rng.randrange(10**11, 10**12)}-{rng.randrange(10**12, 10**13)}-{_rand(rng, ALNUM, 24)}"
    add("slack_token", f"SLACK_BOT_TOKEN={token}", token, token[-18:])
    token = f"xoxp-{rng.randrange(10**11, 10**12)}-{rng.randrange(10**11, 10**12)}-{rng.randrange(10**12, 10**13)}-{_rand(rng, LOWER_ALNUM, 32)}"
    add("slack_token", f"user token {token}", token, token[-20:])
    hook = f"https://hooks.slack.com/services/T{_rand(rng, UPPER_ALNUM, 10)}/B{_rand(rng, UPPER_ALNUM, 10)}/{_rand(rng, ALNUM, 24)}"
    add("slack_webhook", f"post alerts to {hook} please", hook, hook[-20:])
    for prefix in ("sk_live_", "rk_live_", "sk_test_", "rk_test_"):
        key = prefix + _rand(rng, ALNUM, 32)
        add("stripe_key", f"stripe.api_key = {key}", key, key[10:24])
    key = "whsec_" + _rand(rng, ALNUM, 32)
    add("stripe_key", f"webhook signing secret {key}", key, key[8:22])
    key = "AIza" + _rand(rng, URLSAFE, 35)
    add("google_api_key", f"maps key AIza: {key} in the frontend", key, key[6:20])
    pem = _pem(rng, "PRIVATE KEY", 10)
    body_mid = pem.split("\n")[4][10:26]
    service_account = json.dumps({"type": "service_account", "project_id": "demo-project",
                                  "private_key_id": _rand(rng, "0123456789abcdef", 40),
                                  "private_key": pem + "\n", "client_email": "bot@demo-project.iam.gserviceaccount.com"})
    add("google_service_account", service_account, service_account, body_mid)
    key_id = "AKIA" + _rand(rng, UPPER_ALNUM, 16)
    add("aws_access_key", f"aws_access_key_id = {key_id}", key_id, key_id[4:18])
    key_id = "ASIA" + _rand(rng, UPPER_ALNUM, 16)
    add("aws_access_key", f"temporary creds {key_id} from sts", key_id, key_id[4:18])
    secret = _rand(rng, B64, 40)
    add("aws_secret_key", f"aws_secret_access_key = {secret}", secret, secret[6:20])
    secret = _rand(rng, B64, 40)
    add("aws_secret_key", f"AWS creds: {'AKIA' + _rand(rng, UPPER_ALNUM, 16)} {secret}", secret, secret[6:20])
    for _ in range(2):
        token = _jwt(rng)
        add("jwt", f"Authorization header had {token} in it", token, token.split(".")[2][4:18])
    for label in ("RSA PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY"):
        pem = _pem(rng, label)
        add("private_key", f"the deploy key:\n{pem}\nkeep it safe", pem, pem.split("\n")[3][8:24])
    pgp = _pem(rng, "PGP PRIVATE KEY BLOCK", 8)
    add("private_key", f"signing key\n{pgp}\n", pgp, pgp.split("\n")[5][8:24])
    password = _rand(rng, ALNUM, 14)
    add("url_password", f"DATABASE_URL=postgres://app:{password}@db.internal:5432/app", password, password[2:14])
    password = _rand(rng, ALNUM + "!%", 16)
    add("url_password", f"clone https://deploy:{password}@git.example.com/team/repo.git", password, password[3:15])
    password = _rand(rng, ALNUM, 12) + "!"
    add("password_assignment", f"staging db: password={password}", password, password[3:12])
    password = _rand(rng, ALNUM, 14)
    add("password_assignment", f"passwd: {password}", password, password[3:14])
    secret = _rand(rng, ALNUM, 24)
    add("secret_assignment", f'client_secret = "{secret}"', secret, secret[4:18])
    token = _rand(rng, ALNUM, 32)
    add("token_assignment", f"token={token}", token, token[6:20])
    value = _rand(rng, ALNUM + "+/", 44)
    add("high_entropy_assignment", f"SIGNING_MATERIAL = {value}", value, value[8:22])
    token = "glpat-" + _rand(rng, URLSAFE, 20)
    add("gitlab_token", f"gitlab ci token {token}", token, token[6:20])
    key = "SG." + _rand(rng, URLSAFE, 22) + "." + _rand(rng, URLSAFE, 43)
    add("sendgrid_key", f"mail via {key}", key, key[30:44])
    return out
