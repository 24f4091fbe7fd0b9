"""Who may talk to whom: the operator's certificate authority, workload identities, and the
mutual-TLS settings every scidmz channel uses (see docs/operating/security.md)."""
