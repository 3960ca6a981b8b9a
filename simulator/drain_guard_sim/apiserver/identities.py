"""The simulated API server's own users: the admin the tests act as, the server itself (what
it writes on a request's behalf, as an eviction's budget status) and the disruption controller."""

ADMIN = "system:admin"
DISRUPTION_CONTROLLER = "system:serviceaccount:kube-system:disruption-controller"
APISERVER = "system:apiserver"
