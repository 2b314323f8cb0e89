package session

// InputText is inputText for external tests.
func InputText(in Input) string { return inputText(in) }
