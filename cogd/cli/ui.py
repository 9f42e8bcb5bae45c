"""``cogd ui``: the local, read-only web viewer (see :mod:`cogd.ui` and README, "The viewer")."""

from __future__ import annotations

import click

from cogd.cli.base import layout_from


@click.command("ui")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 (0: a free one).")
@click.option("--open", "open_", is_flag=True, help="Open the page in the default browser.")
@click.pass_context
def ui(ctx: click.Context, port: int, open_: bool) -> None:
    """Serve a read-only viewer of this repository's daemon on 127.0.0.1, behind a per-run token.

    Pages: overview, sessions (each delivery and what was used), code (utility by file, an
    entity's usage), memory (events, anchors, tombstones) and ask (the pack for a prompt,
    without recording a delivery). Stops on Ctrl-C.
    """
    from cogd.ui.serve import launch_page, serve  # the ASGI stack loads only for this command

    layout = layout_from(ctx)
    pages = []

    def ready(url: str) -> None:
        click.echo(f"cogd ui for {layout.root}: {url}")
        click.echo("(read-only; the token in the URL is this run's only key; Ctrl-C stops)")
        if open_:
            import webbrowser

            try:  # the browser gets a private page's path, not the URL: its command line is public
                pages.append(launch_page(layout, url))
            except OSError as exc:  # an unsafe .cogd/ included (UnsafePath)
                click.echo(f"cogd ui: not opening a browser: {exc}; open the URL above", err=True)
            else:
                webbrowser.open(pages[-1].as_uri())

    try:
        serve(layout, port, on_ready=ready)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on 127.0.0.1:{port}: {exc}") from exc
    except KeyboardInterrupt:  # uvicorn shuts down on Ctrl-C, then raises it again
        click.echo("cogd ui stopped")
    finally:
        for page in pages:
            page.unlink(missing_ok=True)
