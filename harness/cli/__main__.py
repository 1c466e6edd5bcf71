"""`python -m harness.cli`: the same as the `leakmeter` command."""

from harness.cli import main

main()
