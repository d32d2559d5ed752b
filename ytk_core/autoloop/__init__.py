"""``ytk autoloop``: propose -> carve -> generate -> build -> compile -> verify, until no gain remains."""
