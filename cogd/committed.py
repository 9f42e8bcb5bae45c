"""What a repository itself may decide about its ``.cogd/``: the checks git's view makes possible.

:mod:`cogd.safepath` guards ``.cogd/`` against links, other owners and open
modes. Two things it cannot see from the file system alone:

- **State committed to git.** Only ``.gitignore``, ``config.toml``, ``memory/``
  and ``queries/`` under ``.cogd/`` are meant to travel with a repository (see
  :data:`cogd.paths.GITIGNORE_TEXT`). Anything else that git tracks there — a
  ledger (``state.db``), a tool-use spool, a ledger or recovery marker, an index —
  was made by whoever committed it, yet a fresh clone hands it to this user as
  regular files of their own: a forged ledger's tombstones would refuse true
  claims, a forged spool would be ingested as this user's tool uses, a forged
  marker would raise a false loss. cogd refuses to start on such a tree and says
  which files and how to drop them from git.
- **A repository root that every user may write** (``o+w`` without the sticky
  bit, as ``/tmp`` has). Another user can then rename ``.cogd/`` away and put
  their own in its place between two checks; the 0700 folders inside protect
  nothing. Group-writable roots (team checkouts) are left alone.

Imports only the standard library; :func:`committed_state` runs ``git`` and is
for the daemon's start, ``cogd doctor`` and the CLI, never for the hook's hot path.
"""

from __future__ import annotations

import os
import stat

#: Paths under ``.cogd/`` that a repository may commit (prefixes end with a slash).
ALLOWED = (".cogd/.gitignore", ".cogd/config.toml", ".cogd/memory/", ".cogd/queries/")
GIT_TIMEOUT_S = 10.0


def committed_state(root: "str | os.PathLike[str]") -> list[str]:
    """The paths under ``root/.cogd/`` that git tracks but that only cogd may write.

    ``root``: the work tree's top level. Returns paths relative to ``root``
    (``".cogd/state.db"``), sorted; empty when none, when ``root`` is not a git
    work tree, or when git is missing or does not answer within
    ``GIT_TIMEOUT_S`` seconds (this check can only add refusals, so an unknown
    answer refuses nothing). Never raises.
    """
    import subprocess  # only here (and gitsafe): cogd.paths imports this module, and the hook imports cogd.paths to spawn

    from cogd import gitsafe

    try:
        done = subprocess.run(
            gitsafe.argv(root, "ls-files", "-z", "--", ".cogd"),
            capture_output=True, timeout=GIT_TIMEOUT_S, check=False, env=gitsafe.safe_env(), stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:
        return []
    tracked = [name for name in done.stdout.decode("utf-8", "replace").split("\0") if name]
    return sorted(name for name in tracked if not _allowed(name))


def _allowed(name: str) -> bool:
    return any(name == rule or (rule.endswith("/") and name.startswith(rule)) for rule in ALLOWED)


def root_problem(root: "str | os.PathLike[str]") -> str | None:
    """Why ``root`` lets other users replace ``.cogd/``, or None when it does not.

    A directory writable by others (``o+w``) without the sticky bit lets any
    user rename its entries. Returns a one-line problem naming the mode, or
    None (also when ``root`` cannot be examined: the safe-path checks then speak).
    """
    try:
        st = os.stat(root)
    except OSError:
        return None
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        return f"is writable by every user (mode {stat.S_IMODE(st.st_mode):04o}), so another user can replace its .cogd/"
    return None


def refusal(root: "str | os.PathLike[str]"):
    """The :class:`cogd.safepath.UnsafePath` to raise for ``root``, or None when both checks pass.

    The message names the path, the problem and a fix the user can carry out:
    ``chmod o-w ROOT``, or ``git rm --cached`` of the committed files followed
    by removing them (cogd rebuilds what it needs).
    """
    from cogd.safepath import UnsafePath

    root = os.fspath(root)
    problem = root_problem(root)
    if problem is not None:
        return UnsafePath(root, problem, f"chmod o-w {root}")
    committed = committed_state(root)
    if committed:
        shown = " ".join(committed[:5]) + (f" (and {len(committed) - 5} more)" if len(committed) > 5 else "")
        return UnsafePath(
            os.path.join(root, ".cogd"),
            f"holds files committed to git that only cogd may write: {shown}",
            f"untrack them: cd {root} && git rm -r --cached -- {' '.join(committed[:5])}"
            f"{' …' if len(committed) > 5 else ''}, and commit that; if they came with a clone rather than "
            f"from you, delete them too (cogd rebuilds what it needs)",
        )
    return None
