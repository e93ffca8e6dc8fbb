"""`python -m experiments.run`: the same app as the `memeval-run` console script (app.py)."""

from experiments.run.app import main

if __name__ == "__main__":
    main()
