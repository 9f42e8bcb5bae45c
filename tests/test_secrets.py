"""The secret scanner (cogd/secrets.py) on its own: every family detected and masked to ≤ 4 characters,
masking idempotent, ordinary code and prose left alone, and the cost of a scan."""

from __future__ import annotations

import json
import logging
import statistics
import time

import pytest

from cogd.memory.record import Anchor, Record, free_text, mask_record, new_id, serialise
from cogd.secrets import MaskingLogFilter, mask, mask_data, redact, scan, strip_private
from conftest import refused
from secret_corpus import build

CORPUS = build()


def test_the_corpus_covers_every_family():
    families = {family for family, _, _ in CORPUS}
    assert len(CORPUS) >= 30
    assert families >= {"github_token", "anthropic_key", "openai_key", "slack_token", "slack_webhook", "stripe_key",
                        "google_api_key", "google_service_account", "aws_access_key", "aws_secret_key", "jwt",
                        "private_key", "url_password", "password_assignment", "secret_assignment",
                        "token_assignment", "high_entropy_assignment"}


@pytest.mark.parametrize("family, text, middle", CORPUS, ids=[f"{i}-{c[0]}" for i, c in enumerate(CORPUS)])
def test_each_fake_credential_is_found_and_masked(family, text, middle):
    masked, findings = redact(text)
    assert findings, f"{family} not detected"
    assert middle not in masked
    assert "[secret:" in masked
    for finding in findings:
        kept = finding.preview.rstrip("…")
        assert len(kept) <= 4 and len(kept) <= (finding.end - finding.start) // 4
        assert text[finding.start:finding.end].startswith(kept)
    assert scan(masked) == []  # a masked text scans clean: masking again changes nothing
    assert mask(masked) == masked


EXPECTED_KINDS = {
    "github_token": "github_token", "anthropic_key": "anthropic_key", "openai_key": "openai_key",
    "slack_token": "slack_token", "slack_webhook": "slack_webhook", "stripe_key": "stripe_key",
    "google_api_key": "google_api_key", "aws_access_key": "aws_access_key", "jwt": "jwt",
    "private_key": "private_key", "url_password": "url_password", "password_assignment": "secret_assignment",
    "secret_assignment": "secret_assignment", "token_assignment": "secret_assignment",
    "high_entropy_assignment": "high_entropy_assignment",
}


@pytest.mark.parametrize("family, text, middle", [c for c in CORPUS if c[0] in EXPECTED_KINDS],
                         ids=[f"{i}-{c[0]}" for i, c in enumerate(CORPUS) if c[0] in EXPECTED_KINDS])
def test_each_family_is_named_by_cogd_s_own_rule(family, text, middle):
    kinds = [f.kind for f in scan(text)]
    assert EXPECTED_KINDS[family] in kinds, kinds


def test_masks_keep_the_rest_of_the_text_and_the_family():
    key = "AKIA" + "QWERTYUIOPASDFGH"
    assert mask(f"deploy with {key} today") == "deploy with AKIA…[secret:aws_access_key] today"
    assert mask("postgres://app:s3cretPassw0rd@db:5432/x") == "postgres://app:s3c…[secret:url_password]@db:5432/x"
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx9\nq83hfd0Qz\n-----END RSA PRIVATE KEY-----"
    assert mask(f"key:\n{pem}\nend") == ("key:\n-----BEGIN RSA PRIVATE KEY-----\n…[secret:private_key]\n"
                                          "-----END RSA PRIVATE KEY-----\nend")


def test_credentials_said_in_prose_and_headers():
    assert mask("the staging db password is Hunter2-rotated, keep it quiet") == \
        "the staging db password is Hun…[secret:secret_assignment], keep it quiet"
    assert mask("curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA=='") == \
        "curl -H 'Authorization: Basic dXNl…[secret:authorization_header]'"
    assert mask("curl -H 'X-Api-Key: 9f1c2d3e4a5b6c7dAbC'") == "curl -H 'X-Api-Key: 9f1c…[secret:secret_assignment]'"
    assert mask("passwd='geheim$parole'") == "passwd='geh…[secret:secret_assignment]'"
    for prose in ("the password is required", "the token is expired", "a password is never logged"):
        assert scan(prose) == [], prose


def test_an_unterminated_private_key_is_masked_to_the_end():
    text = "pasted half a key:\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\nAAAA"
    masked = mask(text)
    assert masked == "pasted half a key:\n-----BEGIN OPENSSH PRIVATE KEY-----\n…[secret:private_key]"


def test_the_second_net_catches_families_cogd_has_no_rule_for():
    """detect-secrets' Twilio, SendGrid, GitLab and npm plugins: families without a rule of cogd's."""
    for text, middle in (("twilio AC" + "a1b2c3d4e5f60718293a4b5c6d7e8f90", "c3d4e5f60718293a"),
                         ("SG." + "Zx81kQm2Lp0aWv3Ybn7TqQ" + "." + "Lk3mZx9Pw4Rt6Yb1Nc7Hd5Jf0Ga2Se8TqWv3Ybn7Tq1A", "Lk3mZx9Pw4Rt6"),
                         ("ci: glpat-Zx81kQm2Lp0aWv3Ybn7T", "kQm2Lp0aWv3Y"),
                         ("//registry.npmjs.org/:_authToken=npm_Q8v2Lk3mZx9Pw4Rt6Yb1Nc7Hd5Jf0Ga2Se8T", "Q8v2Lk3mZx9Pw4")):
        assert scan(text), text
        assert middle not in mask(text)
    assert [f.kind for f in scan("twilio AC" + "a1b2c3d4e5f60718293a4b5c6d7e8f90")] == ["ds_twilio_api_key"]


NOT_SECRETS = [
    "set `timeout = 30` in config.toml",
    "commit af8ab7d2c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8 fixed it",
    "the password: <your password> placeholder in the docs",
    "path = src/cogd/memory/record.py",
    "request 123e4567-e89b-12d3-a456-426614174000 failed with a timeout after 30 s",
    "token = self.next_token()",
    "password = get_password(user)",
    "max_tokens = 4096",
    "the tokenizer splits on whitespace; auth happens in the middleware",
    "author = 'Jane Doe'",
    "secret_key = os.environ['SECRET_KEY']",
    "api_key = settings.API_KEY",
    'model_name = "sentence-transformers/all-MiniLM-L6-v2"',
    "def verify_access_token(token: str) -> bool:",
    "KeyError: 'parse_date_header_with_timezone'",
    "sha256 = 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "Fix MemoryStore.record in cogd/memory/api.py; see tests/test_memory.py::test_exact_and_fuzzy_title_duplicates",
    "see https://github.com/org/repo/blob/main/cogd/secrets.py#L10",
    "postgres://user:${DB_PASSWORD}@localhost/db",
    "git rev-parse HEAD prints 3f2b9c1e4d5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c",
    "password_hash = bcrypt.hashpw(password, salt)",
    "if token is None: raise AuthError('missing token')",
    "github_token: ${{ secrets.GITHUB_TOKEN }}",
    "The access_key_id field is required",
    "export PATH=/usr/local/bin:$PATH",
    "ULID 01JD6Y0M7Q3V9S2W1T0R8K4N5P was superseded by 01JD6Y0M7Q3V9S2W1T0R8K4N5Q",
    # an id whose time part spells A3T: detect-secrets' AWS key id pattern matches inside it
    "id: 01M8XYA3TW16BVC401RV8QGQQ2\nsupersedes: [01M8XYA3TW16BVC401RV8QGQQ2]",
    "return jsonify(access_token=create_access_token(identity=user.id))",
    "headers = {'Authorization': f'Bearer {token}'}",
    "JSONDecoder.raw_decode returns (obj, end); parse_headers_from_bytes handles folding",
    "class TokenBucketRateLimiter: refill_rate_per_second = 10",
    # shapes the standard library's own code has (email, urllib, shlex, ssl, tempfile, xml)
    "    token_type = 'bare-quoted-string'",
    "        if token == START_ELEMENT:",
    "        self.username, self.password = credentials",
    "    auth_header = 'Proxy-Authorization'",
    "            credentials = '{0}:{1}'.format(user, passwd)",
    "    SERVER_AUTH = '1.3.6.1.5.5.7.3.1'",
    '    characters = "abcdefghijklmnopqrstuvwxyz0123456789_"',
    "            token_range = \"%d,%d-%d,%d:\" % (start, end)",
    "        fds_to_pass = [listener.fileno(), alive_r]",
    "            authorization = authorization[1].encode('ascii')",
    "        pwd = (self.password.encode('utf-8'))",
]


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_ordinary_code_and_prose_is_not_masked(text):
    assert scan(text) == [], [(f.kind, text[f.start:f.end]) for f in scan(text)]
    assert mask(text) == text


def test_private_spans_go_first():
    assert strip_private("keep <private>drop AKIAQWERTYUIOPASDFGH</private> this") == "keep  this"
    assert strip_private("unclosed <PRIVATE>runs to the end") == "unclosed "


def test_mask_data_walks_nested_values():
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    masked, findings = mask_data({"evidence": [{"note": f"pushed with {token}"}], "n": 3, token: True})
    assert masked == {"evidence": [{"note": "pushed with ghp_…[secret:github_token]"}], "n": 3,
                      "ghp_…[secret:github_token]": True}
    assert [f.kind for f in findings] == ["github_token", "github_token"]


def test_log_filter_masks_messages_and_tracebacks(tmp_path):
    path = tmp_path / "x.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.addFilter(MaskingLogFilter())
    logger = logging.getLogger("cogd.test_secrets")
    logger.addHandler(handler)
    try:
        logger.warning("refused %s", "sk_live_" + "Q8v2Lk3mZx9Pw4Rt6Yb1Nc7H")
        try:
            raise ValueError("bad anchor AKIAQWERTYUIOPASDFGH")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
        handler.close()
    text = path.read_text(encoding="utf-8")
    assert "Q8v2Lk3mZx9Pw4Rt6Yb1" not in text and "QWERTYUIOPASDFGH" not in text
    assert "sk_l…[secret:stripe_key]" in text and "AKIA…[secret:aws_access_key]" in text


def test_scan_is_cheap_enough_for_every_prompt():
    """Generous bounds (a busy machine): a clean prompt well under 5 ms, a 20 KB paste under 150 ms."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from secret_scan_speed import PROMPT, traceback_text

    tb = traceback_text()
    mask(PROMPT)
    small = statistics.median(_time(lambda: mask(PROMPT)) for _ in range(50))
    large = statistics.median(_time(lambda: mask(tb)) for _ in range(5))
    assert small < 0.005 and large < 0.150, (small, large)
    assert mask(tb) == tb


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# ---- the memory store's use of it ----------------------------------------------------------------
JWT = CORPUS[[c[0] for c in CORPUS].index("jwt")]


def test_a_long_tag_is_scanned_before_it_is_cut(store, root):
    """A tag is stored cut to 100 characters; a JWT cut there no longer looked like one, and its
    first 100 characters were stored. Each field is now scanned whole, then cut."""
    _, text, _ = JWT
    token = text.split()[3]
    assert len(token) > 100
    refused("secret_detected", store.record, "knowledge", "the admin session", tags=[token], source="human")
    refused("secret_detected", store.record, "knowledge", "the admin session", session_id=token[:200])
    refused("secret_detected", store.record, "knowledge", "the admin session", anchors=[token])
    assert not list((root / ".cogd" / "memory").rglob("*.md"))


def test_private_spans_leave_every_field(store, root):
    result = store.record("knowledge", "deploys go through the release branch", title="Release <private>Bob</private> flow",
                          tags=["ops", "<private>bob-555</private>"], creation_reason="asked <private>Bob at 555</private>",
                          source="human")
    text = (root / ".cogd" / "memory" / "knowledge" / f"{result['record']['id']}.md").read_text(encoding="utf-8")
    assert "Bob" not in text and "555" not in text
    assert result["record"]["tags"] == ["ops"] and result["record"]["title"] == "Release flow"


def test_a_record_file_scans_clean():
    """Frontmatter is full of ids, hashes and timestamps: none of it may look like a secret."""
    record = Record(id=new_id(), type="knowledge", title="parse_date returns naive datetimes", status="active",
                    body="callers must attach UTC", created_at=1796125234.55, updated_at=1796125234.55,
                    valid_from_commit="af8ab7d2c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8", session_id="3f2b8c1e-0000-4000-8000-00000000c0de",
                    anchors=[Anchor("email/utils.py::parsedate_to_datetime", "9f1c2d3e4a5b6c7d")], supersedes=new_id(),
                    tags=["dates"], tombstone="sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                    extra={"evidence": [{"id": new_id(), "session_id": "mcp-3f2b9c1e4d5a", "how": "embedding", "score": 0.91}]})
    assert scan(serialise(record)) == []
    assert mask_record(record) == []


def test_mask_record_reaches_every_field():
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    record = Record(id=new_id(), type="knowledge", title=f"t {token}", status="active", body=f"b {token}",
                    created_at=0.0, updated_at=0.0, creation_reason=token, session_id=token, tags=[token],
                    anchors=[Anchor(token, token)], rejected_reason=token, extra={"k": [{"n": token}]})
    assert len(mask_record(record)) == 9  # title, body, reason, session, tag, anchor ×2, rejection, extra
    assert not any("a1B2c3D4e5F6" in text for _, text in free_text(record))


def test_a_key_block_folded_by_yaml_is_masked_field_by_field(store, root):
    """The raw text cannot be masked in place when YAML folded a key block across lines: the file is
    masked field by field instead, and stays a good record."""
    import yaml

    family, text, middle = next(c for c in CORPUS if c[0] == "private_key")
    entity_id = new_id()
    front = {"id": entity_id, "type": "knowledge", "title": "a key", "status": "active", "source": "human",
             "creation_reason": text, "tags": [text]}
    path = root / ".cogd" / "memory" / "knowledge" / f"{entity_id}.md"
    path.write_text("---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n\nthe deploy key\n", encoding="utf-8")
    assert "\n\n" in path.read_text(encoding="utf-8")  # YAML wrote the block's lines as folded paragraphs
    store.sync()
    after = path.read_text(encoding="utf-8")
    assert middle not in after and middle not in after.replace("\n  ", "").replace("\n", "")
    got = store.get(entity_id)
    assert got["problem"] is None
    assert "…[secret:private_key]" in got["record"]["tags"][0]
    assert [e["action"] for e in store.events(entity_id)][:2] == ["secret_masked", "create"]


def test_the_first_sync_of_a_process_masks_files_it_saw_before(root):
    """A record accepted before the scanner knew a family (file and projection hold the token, the
    file's stat unchanged since) is masked by the next process's first sync: in the file, in the
    projection, and not copied into the edit event's pre-image."""
    from cogd.memory.api import MemoryStore
    from cogd.memory.normalise import content_hash
    from cogd.memory.record import read

    first = MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index")
    rid = first.record("knowledge", "the release bot pushes with its own token", source="human")["record"]["id"]
    rel = f"knowledge/{rid}.md"
    path = root / ".cogd" / "memory" / rel
    token = "github_pat_" + "11ABCDEFG0aZ81kQm2Lp0aWv3Ybn7T_xY4kPq9rS2tUv6wX8yZ0aB1cD3eF5gH7iJ9kL1mN3oP5qR7sT9uV1wX3yZ5aB7cD9e"
    path.write_text(path.read_text(encoding="utf-8").replace("own token", f"own token {token}"), encoding="utf-8")
    old = read(path)  # what an older cogd accepted and projected
    first.projection.upsert(old, old.body, content_hash(old.body))
    first.projection.set_file(rel, path.stat().st_mtime_ns, path.stat().st_size, rid, None)
    first.sync()
    first.close()
    assert token in path.read_text(encoding="utf-8")  # (this process had swept already)
    second = MemoryStore(root, root / ".cogd" / "state.db", root / ".cogd" / "index")
    try:
        second.sync()
        assert "0aZ81kQm2Lp0" not in path.read_text(encoding="utf-8")
        assert "gith…[secret:github_token]" in second.get(rid)["record"]["body"]
        assert not any("0aZ81kQm2Lp0" in (e["pre_image"] or "") for e in second.events(rid))
        assert [e["action"] for e in second.events(rid)][-2:] == ["secret_masked", "edit"]
    finally:
        second.close()
    for db in (root / ".cogd").rglob("*.db*"):
        assert b"0aZ81kQm2Lp0" not in db.read_bytes(), db


def test_a_ledger_written_before_masking_is_masked_once_when_opened(tmp_path):
    """Prompts stored by an older cogd stayed in clear; opening the ledger masks them (once), and the
    old text is not left in the database's free pages or its WAL."""
    import sqlite3

    from cogd.usage.ledger import Ledger

    db = tmp_path / "state.db"
    Ledger(db).close()
    key = "AKIA" + "ZXCVBNMQWERTYUIO"
    password = "Tr0ub4dor-and-3x"
    with sqlite3.connect(db) as conn:  # what an older version wrote: client text as sent
        conn.execute("DELETE FROM meta WHERE key = 'secrets_masked'")
        conn.execute("INSERT INTO deliveries(session_id, event, source, created_at, query, size_chars, item_count) "
                     "VALUES ('s', 'prompt', '', 1.0, ?, 10, 0)", (f"deploy fails with {key} and password={password}",))
        conn.execute("INSERT INTO associations(entity_id, path, query) VALUES ('a.py::f', 'a.py', ?)",
                     (f"deploy fails with {key}",))
        conn.execute("INSERT INTO tool_uses(session_id, tool_name, tool_use_id, created_at, touches) VALUES "
                     "('s', 'Read', 't', 1.0, ?)", (json.dumps([{"path": f"notes/{key}.txt", "action": "read",
                                                                  "start_line": None, "end_line": None}]),))
    ledger = Ledger(db)
    try:
        assert ledger.deliveries()[0]["query"] == ("deploy fails with AKIA…[secret:aws_access_key] and "
                                                    "password=Tr0u…[secret:secret_assignment]")
        assert ledger.tool_uses()[0]["touches"][0]["path"] == "notes/AKIA…[secret:aws_access_key].txt"
        assert ledger.associated('"deploy"') == [("a.py::f", pytest.approx(ledger.associated('"deploy"')[0][1]))]
    finally:
        ledger.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert b"ZXCVBNMQWERTYUIO" not in raw and b"b4dor-and-3x" not in raw
    Ledger(db).close()  # a second open finds nothing to do


def test_an_aws_key_id_shape_inside_a_record_id_is_no_secret_but_alone_it_is():
    """A memory record's id is never masked (that would rewrite the record); the same 20
    characters on their own, or a 27-character run around them, are still an AWS key id."""
    ulid = "01M8XYA3TW16BVC401RV8QGQQ2"
    assert redact(f"id: {ulid}") == (f"id: {ulid}", [])
    assert [f.kind for f in redact("id: A3TW16BVC401RV8QGQQ2")[1]] == ["aws_access_key"]
    assert [f.kind for f in redact(f"id: {ulid}X")[1]] == ["ds_aws_access_key"]
