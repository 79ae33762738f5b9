"""Adapters: the only code that talks to AWS. Each takes an injected boto3 client."""
