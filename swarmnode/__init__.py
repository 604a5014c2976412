"""swarmnode: a peer-to-peer daemon for collective RL of language models (SAPO)."""

__version__ = "0.1.0"
