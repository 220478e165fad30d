"""The `ragmesh` command. It sits above the services and the gateway: it alone knows every one of them (it
starts them all for `ragmesh up`), importing each only when a command needs it, so an image that carries one
service and this package runs `ragmesh serve <that service>`."""
