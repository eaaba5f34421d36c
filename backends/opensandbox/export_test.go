package opensandbox

// SetListPageSize changes how many sandboxes List asks for per page, for
// tests of pagination; it returns a function restoring the old size.
func SetListPageSize(n int) (restore func()) {
	old := listPageSize
	listPageSize = n
	return func() { listPageSize = old }
}
