"""``python -m cogd.cli``: the ``cogd`` command, for installations without the ``cogd`` script."""

from cogd.cli import main

main()
