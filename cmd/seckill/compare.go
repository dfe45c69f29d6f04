package main

import (
	"context"
	"errors"
	"io"
)

func runCompare(ctx context.Context, c benchConfig, stdout, stderr io.Writer) error {
	return errors.New("--compare is not available yet")
}
