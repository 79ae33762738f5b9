"""One construct per concern; the stack composes them and wires the grants between them."""
