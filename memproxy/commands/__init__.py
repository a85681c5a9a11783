"""``memproxy`` subcommands big enough for a module of their own (serve, offline, demo, mcp)."""
