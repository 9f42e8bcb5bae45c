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
    if not result.get("enabled"):
        console.print("history mining is off ([history] enabled = false)")
        return
    skipped = result.get("skipped") or {}
    console.print(f"commits mined: {result['mined']} (reachable from HEAD, of the newest {result['max_commits']}); "
                  f"skipped: {sum(skipped.values())}"
                  + (" (" + ", ".join(f"{reason} {n}" for reason, n in sorted(skipped.items())) + ")" if skipped else ""),
                  markup=False)
    if result.get("hidden"):
        console.print(f"hidden: {result['hidden']} commits stored but not among the newest {result['max_commits']} "
                      "reachable from HEAD (not used while HEAD is here)")
    last = result.get("last_commit")
    if last:
        console.print(f"last commit mined: {last['hash'][:10]} {last['subject']} ({format_age(time.time() - last['time'])} ago)",
                      markup=False)
    console.print(f"co-change pairs: {result['pairs']}; time spent mining: {result['seconds']:.1f} s; "
                  f"state: {result['state']}{' — ' + result['error'] if result.get('error') else ''}; "
                  f"used by packs: {'yes' if result['usable'] else 'not yet (HEAD not synchronised)'}", markup=False)
