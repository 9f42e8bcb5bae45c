"""Every git command cogd runs on a repository, with the repository's own programs switched off.

A work tree's ``.git/config`` (writable by whoever packed or shared the tree) can name programs
git would start while cogd only reads: an fsmonitor hook, a pager, hooks, an external diff or
text conversion, clean/smudge/process filters (reached by ``git status`` through a committed
``.gitattributes``), and, for a partial clone, a lazy fetch whose transport
(``remote.*.uploadpack``, ``core.sshCommand``, ``ext::`` URLs) is again the repository's choice.
Command-line ``-c`` settings win over every config file, so :func:`argv` gives each command:

* :data:`SAFE_CONFIG`: fsmonitor, hooks, external diff and pager off, every transport refused
  (``protocol.allow=never``: a missing object of a partial clone is an error, not a fetch),
  ``core.sshCommand=false``, diff prefixes fixed (``diff.noprefix`` would hide every path);
* for each filter driver the repository configures, its ``clean``, ``smudge`` and ``process``
  set empty, which git treats as no filter (found with ``git config --get-regexp``, which
  runs nothing);

and :func:`safe_env` an environment with none of the caller's ``GIT_*`` variables, no system
config, no prompts, no lazy fetch and no optional locks. Standard library only: the index, the
memory sync, the watcher, snapshots and history all use it.
"""

from __future__ import annotations

import os
import subprocess

SAFE_CONFIG = (
    "core.fsmonitor=", "core.hooksPath=/dev/null", "diff.external=", "core.pager=cat", "core.quotepath=off",
    "log.showSignature=false", "core.untrackedCache=false", "gc.auto=0", "protocol.allow=never",
    "core.sshCommand=false", "diff.noprefix=false", "diff.mnemonicPrefix=false",
)
FILTER_KEYS = ("clean", "smudge", "process")
_FILTER_CACHE: dict[tuple[str, int, int], tuple[str, ...]] = {}


def safe_env() -> dict[str, str]:
    """The environment of every git process cogd starts (see the module doc)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") and k not in ("PAGER", "LESS")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", PAGER="cat",
               GIT_OPTIONAL_LOCKS="0", LC_ALL="C", GIT_ASKPASS="/bin/false", SSH_ASKPASS="/bin/false",
               GIT_NO_LAZY_FETCH="1")
    return env


def _config_stamp(root: str) -> tuple[int, int] | None:
    """(mtime ns, size) of ``root/.git/config`` when ``.git`` is a plain directory, else None."""
    try:
        st = os.stat(os.path.join(root, ".git", "config"))
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def filter_overrides(root: str | os.PathLike) -> tuple[str, ...]:
    """``-c filter.NAME.KEY=`` arguments emptying every filter driver the repository configures.

    ``root``: the work tree. Read with ``git config -z --get-regexp`` (runs no program), cached
    while ``.git/config`` keeps its size and mtime. Returns () when git fails (then the command
    itself will fail the same way)."""
    root = os.fspath(root)
    stamp = _config_stamp(root)
    key = (root, *stamp) if stamp is not None else None
    if key is not None and key in _FILTER_CACHE:
        return _FILTER_CACHE[key]
    argv = ["git", "-C", root]
    for item in SAFE_CONFIG:
        argv += ["-c", item]
    try:
        proc = subprocess.run(argv + ["config", "-z", "--get-regexp", r"^filter\."], capture_output=True,
                              timeout=10, env=safe_env(), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    names: set[str] = set()
    for record in proc.stdout.split(b"\0"):
        name = record.split(b"\n", 1)[0].decode("utf-8", "surrogateescape")
        if name.startswith("filter.") and name.count(".") >= 2:
            names.add(name[len("filter."):].rsplit(".", 1)[0])
    out: list[str] = []
    for name in sorted(names):
        for item in FILTER_KEYS:
            out += ["-c", f"filter.{name}.{item}="]
    result = tuple(out)
    if key is not None:
        if len(_FILTER_CACHE) > 64:
            _FILTER_CACHE.clear()
        _FILTER_CACHE[key] = result
    return result


def argv(root: str | os.PathLike | None, *args: str) -> list[str]:
    """``git [-C root] -c … args``: the argv of one safe git command (``root`` None: the cwd)."""
    out = ["git"] if root is None else ["git", "-C", os.fspath(root)]
    for item in SAFE_CONFIG:
        out += ["-c", item]
    out += filter_overrides(root if root is not None else os.getcwd())
    return out + list(args)
