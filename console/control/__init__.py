"""The control plane (`leasectl supervise`): carries out fleet shutdowns, writes reconciliation
records, sweeps expired leases. Runs beside the workers, never inside them."""
