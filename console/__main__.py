"""`python -m console` is `leasectl`."""

from console.operator.cli import main

main()
