"""Entry point of swarmnode/lab/soak.py (--help says what the command does)."""

from swarmnode.lab.soak import main

if __name__ == "__main__":
    raise SystemExit(main())
