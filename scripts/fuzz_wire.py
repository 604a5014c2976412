"""Entry point of swarmnode/lab/fuzz_wire.py (--help says what the command does)."""

from swarmnode.lab.fuzz_wire import main

if __name__ == "__main__":
    raise SystemExit(main())
