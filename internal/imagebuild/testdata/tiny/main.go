// Command tiny stands in for the appliance in the image tests: a small static
// binary that prints its version.
package main

import (
	"fmt"
	"os"
)

var version = "dev"

func main() {
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println("tiny", version)
		return
	}
	fmt.Fprintln(os.Stderr, "usage: tiny version")
	os.Exit(2)
}
