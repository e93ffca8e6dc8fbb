"""`python -m tests.answer.run_with_standins <overrides>`: memeval-run with tests/answer/standins.py installed
(F's modules, where not merged yet)."""

from tests.answer.standins import run_main

run_main()
