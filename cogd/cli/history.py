"""``cogd history``: what the daemon mined from the repository's commits (cogd.history)."""

from __future__ import annotations

import json
import time

import click

from cogd.ages import format_age
from cogd.cli.base import backend, console, layout_from


@click.command("history")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def history(ctx: click.Context, as_json: bool) -> None:
    """Commits mined from HEAD's history: skipped by reason, the last one mined, time spent."""
    with backend(layout_from(ctx)) as be:
        result = be.call("history.status", {})
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    for line in describe(result, time.time()):
        console.print(line, markup=False)


def describe(result: dict, now: float) -> list[str]:
    """The lines ``cogd history`` prints for a ``history.status`` result (``now``: epoch seconds,
    for the last commit's age): counts with the ``[history] max_commits`` they are taken from,
    and what will happen next — no daemon (nothing mines until one starts), a first pass under
    way (its pairs and time are not counted yet), or the last pass's figures."""
    if not result.get("enabled"):
        return ["history mining is off ([history] enabled = false)"]
    out = []
    skipped = result.get("skipped") or {}
    out.append(f"commits mined: {result['mined']} (reachable from HEAD, of the newest {result['max_commits']}: "
               "[history] max_commits); "
               f"skipped: {sum(skipped.values())}"
               + (" (" + ", ".join(f"{reason} {n}" for reason, n in sorted(skipped.items())) + ")" if skipped else ""))
    if result.get("hidden"):
        out.append(f"hidden: {result['hidden']} commits stored but not among the newest {result['max_commits']} "
                   "reachable from HEAD (not used while HEAD is here)")
    last = result.get("last_commit")
    if last:
        out.append(f"last commit mined: {last['hash'][:10]} {last['subject']} ({format_age(now - last['time'])} ago)")
    used = 'yes' if result['usable'] else 'not yet (HEAD not synchronised)'
    if not result.get("running", True):
        # this command opened the projection itself: nothing mines until a daemon runs
        return out + [f"co-change pairs: {result['pairs']}; time spent mining: {result['seconds']:.1f} s; "
                      f"used by packs: {used}",
                      "no daemon runs: nothing is being mined now; `cogd start` mines HEAD's history in the "
                      "background (after the first index) and keeps it in step as HEAD moves"]
    if result.get("state") in ("waiting", "syncing", "mining") and not result.get("last_pass"):
        what = ("mining starts after the first index" if result["state"] == "waiting"
                else f"first mining pass under way: {result['commits']} commits stored so far")
        return out + [f"{what}; co-change pairs and the time spent are counted when the pass ends; "
                      f"used by packs: {used}"]
    return out + [f"co-change pairs: {result['pairs']}; time spent mining: {result['seconds']:.1f} s; "
                  f"state: {result['state']}{' — ' + result['error'] if result.get('error') else ''}; "
                  f"used by packs: {used}"]
