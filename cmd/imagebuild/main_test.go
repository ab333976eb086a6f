package main

import "testing"

func TestDescribedCommit(t *testing.T) {
	for in, want := range map[string]string{
		"abc1234":               "abc1234",
		"abc1234-dirty":         "abc1234",
		"v1.2-3-gabc1234":       "abc1234",
		"v1.2-3-gabc1234-dirty": "abc1234",
		"v1.2":                  "v1.2",
		"v1.2-dirty":            "v1.2",
		"release-gold":          "release-gold", // "-g" but no hash after it
	} {
		if got := describedCommit(in); got != want {
			t.Errorf("describedCommit(%q) = %q, want %q", in, got, want)
		}
	}
}
