"""`python -m frontdesk`: the `frontdesk` command, for when the console script is not on
PATH (a venv that is not activated). Part of the public face, above every folder."""

from frontdesk.cli import main

if __name__ == "__main__":
    main()
