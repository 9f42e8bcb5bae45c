"""Index snapshots on an S3-compatible store: a moto server on loopback, started by the test
(skipped with the reason when it cannot start). Publish at A, a clone at B pulls A and catches
up to a fresh build; a server that goes away mid-pull fails clearly and the next pull resumes."""

from __future__ import annotations

import json

import pytest

from conftest import Daemon, git, run_cogd
from snapshot_helpers import clone_at, config_text, make_history, projection

BUCKET = "team-snapshots"


def s3_config(endpoint: str) -> str:
    return config_text(f"s3://{BUCKET}/cogd", extra=f'endpoint = "{endpoint}"\nregion = "us-east-1"\n')


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 with an empty bucket, and credentials in the environment."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        pytest.skip(f"moto[server] is not installed ({exc}): pip install -e '.[test]'")
    with pytest.MonkeyPatch.context() as env:
        for key, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                           ("AWS_DEFAULT_REGION", "us-east-1"), ("AWS_EC2_METADATA_DISABLED", "true")):
            env.setenv(key, value)
        env.delenv("AWS_SESSION_TOKEN", raising=False)
        env.delenv("AWS_PROFILE", raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        try:
            server.start()
        except Exception as exc:  # no socket, a port refused: the reason is the skip's
            pytest.skip(f"the moto S3 server could not start on loopback: {exc}")
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        from pyarrow import fs

        fs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", region="us-east-1",
                        allow_bucket_creation=True).create_dir(BUCKET)
        base = tmp_path_factory.mktemp("s3snap")
        origin = base / "origin"
        a, b = make_history(origin, s3_config(endpoint))
        fresh = clone_at(origin, base / "fresh", b)
        run_cogd(fresh, "index")
        yield {"server": server, "endpoint": endpoint, "port": port, "base": base, "origin": origin, "a": a, "b": b,
               "fresh": projection(fresh)}
        server.stop()


def test_publish_to_s3_and_cogd_up_pulls_and_catches_up(s3):
    origin = s3["origin"]
    run_cogd(origin, "index")
    published = json.loads(run_cogd(origin, "snapshot", "publish", "--json").stdout)
    assert published["state"] == "published" and published["uri"] == f"s3://{BUCKET}/cogd"
    assert json.loads(run_cogd(origin, "snapshot", "publish", "--json").stdout)["state"] == "exists"
    clone = clone_at(origin, s3["base"] / "up", s3["b"])
    daemon = Daemon(clone)
    try:
        out = run_cogd(clone, "up", "--no-hooks", "--wait-embed", "0").stdout
        assert f"snapshot of {s3['a'][:12]} installed (1 commit behind HEAD" in out
        run_cogd(clone, "index")
    finally:
        daemon.stop()
    got = projection(clone)
    for key in ("entities", "edges", "refs", "fts", "fts_rows", "files", "commit"):
        assert got[key] == s3["fresh"][key], key


def test_a_server_that_goes_away_mid_pull_fails_clearly_and_the_next_pull_resumes(s3, monkeypatch):
    from moto.server import ThreadedMotoServer

    from cogd.config import load_config
    from cogd.paths import Layout
    from cogd.snapshot import publish, pull

    monkeypatch.setattr(publish, "PART_BYTES", 64 << 10)  # several objects to fetch
    origin = clone_at(s3["origin"], s3["base"] / "small-parts", s3["b"])
    (origin / ".cogd" / "config.toml").write_text(s3_config(s3["endpoint"]).replace("/cogd\"", "/small\""))
    git(origin, "update-index", "--assume-unchanged", ".cogd/config.toml")
    run_cogd(origin, "index")
    layout = Layout(origin)
    config = load_config(layout.config_file)
    assert publish.publish(layout, config).state == "published"
    clone = clone_at(s3["origin"], s3["base"] / "vanish", s3["b"])
    (clone / ".cogd" / "config.toml").write_text((origin / ".cogd" / "config.toml").read_text())
    layout = Layout(clone).ensure()
    sizes = []

    def vanish(_name, size):
        sizes.append(size)
        if len(sizes) == 1:
            s3["server"].stop()  # the service goes away after the first object
    failed = pull.pull(layout, config, hook=vanish)
    assert failed.state == "failed" and failed.downloaded_bytes == sizes[0]
    assert "snapshot store s3://team-snapshots/small: cannot read" in failed.reason
    assert not layout.index_db.exists()
    s3["server"] = ThreadedMotoServer(ip_address="127.0.0.1", port=s3["port"], verbose=False)
    s3["server"].start()  # moto keeps its buckets in the process: the same objects come back
    resumed = pull.pull(layout, config)
    assert resumed.state == "installed" and resumed.reused_bytes == sizes[0] and resumed.downloaded_bytes > 0
    run_cogd(clone, "index")
    assert projection(clone)["entities"] == s3["fresh"]["entities"]
