"""`python -m trainhub` is the `trainhub` command."""

from trainhub.cli import main

main()
