"""``cogd ui``: a local, read-only web viewer of one repository's daemon.

:mod:`~cogd.ui.source` reads the daemon over its socket (starting it when none runs),
:mod:`~cogd.ui.charts` draws the charts as SVG on the server, :mod:`~cogd.ui.pages` builds
the pages from the daemon's answers, :mod:`~cogd.ui.app` is the ASGI application (the token,
method and header checks in front of every route) and :mod:`~cogd.ui.serve` binds it to the
loopback address. Templates and static files ship in the package (``templates/``,
``static/``): nothing is fetched from anywhere else. See docs/architecture.md ("The viewer").
"""
