"""kube-apiserver's server-side printers (the Table format), for the fake."""
