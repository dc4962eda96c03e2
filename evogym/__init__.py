"""evogym: a host for the EvoPolicyGym benchmark protocol (sandboxed, exact accounting)."""
__version__ = "0.1.0"
PROTOCOL_VERSION = "protocol/v2.0-draft"
