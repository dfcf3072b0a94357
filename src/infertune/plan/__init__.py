"""`infertune plan`: memory, KV capacity, roofline and commands for serving a model on a named GPU."""
