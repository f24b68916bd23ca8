"""The rules core: pure rules that own their data types and import only the pure core (docs/architecture.md)."""
