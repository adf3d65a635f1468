package framework

import "fmt"

// Exited reports whether the in-process controller has stopped on its own,
// and with which error.
func (c *Controller) Exited() error {
	select {
	case err := <-c.done:
		c.done <- err // Stop waits for it too
		return fmt.Errorf("controller exited: %v", err)
	default:
		return nil
	}
}
