"""Entry point of swarmnode/lab/probe_tasks.py (--help says what the command does)."""

from swarmnode.lab.probe_tasks import main

if __name__ == "__main__":
    main()
