"""`python -m trainhub` is the `trainhub` command."""

from trainhub.entry import main

main()
