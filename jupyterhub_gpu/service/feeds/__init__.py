"""The service's feeds: read the ledger, build the rules' and the domain's inputs, apply their decisions."""
