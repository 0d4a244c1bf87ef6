"""`python -m frontdesk.cli`: the `frontdesk` command (as `python -m frontdesk`)."""

from frontdesk.cli import main

if __name__ == "__main__":
    main()
