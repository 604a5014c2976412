"""Entry point of swarmnode/lab/config_reference.py: prints the config reference table;
--write splices it into docs/config.md."""

from swarmnode.lab.config_reference import main

if __name__ == "__main__":
    main()
