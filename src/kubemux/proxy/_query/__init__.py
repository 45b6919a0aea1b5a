"""What a read asks for: label and field selectors, resourceVersion options, as kube-apiserver reads them."""
