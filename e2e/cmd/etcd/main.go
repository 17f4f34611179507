// Command etcd is etcd's own server main, built from the module proxy so
// that the local cluster needs no download of a release binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
