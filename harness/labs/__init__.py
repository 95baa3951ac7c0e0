"""perfwarden.harness.labs: the measuring labs, which write every byte of a leg's evidence (design §1)."""
