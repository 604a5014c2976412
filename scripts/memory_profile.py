"""Entry point of swarmnode/lab/memory_profile.py (--help says what the command does)."""

from swarmnode.lab.memory_profile import main

if __name__ == "__main__":
    raise SystemExit(main())
