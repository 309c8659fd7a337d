"""``python -m minidb``: the same command line as the ``minidb`` script."""

from minidb._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
