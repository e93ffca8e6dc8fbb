"""`python -m experiments.study study=<plan>`: see experiments.study.cli."""

from experiments.study.cli import main

if __name__ == "__main__":
    main()
