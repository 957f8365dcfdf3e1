"""Interfaces: the CLI, the web dashboard and the MCP server. Thin: parse input, call the engine, render."""
