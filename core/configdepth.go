package core

import "fmt"

// maxConfigNesting bounds how deeply a configuration file may nest tables,
// arrays, inline tables and dotted keys (each level counts one). The
// configuration's deepest real key is a handful of levels; the TOML parser
// and the loader behind it take time quadratic in the depth (a 600 KB file
// nested 32,000 deep parsed for minutes), so a file past the bound is
// refused before it is parsed.
const maxConfigNesting = 64

// checkConfigNesting scans a TOML document for its nesting depth without
// parsing it: brackets and braces outside strings and comments, plus the
// dots of the key being read. It returns a *ConfigError naming the line
// where the depth first exceeds maxConfigNesting. The scan is linear and
// allocation-free, so it is as fast as reading the file.
func checkConfigNesting(data []byte) *ConfigError {
	var (
		stack  [maxConfigNesting + 1]byte // the open containers: '[' or '{'
		depth  int
		keyDot int // dots of the (dotted) key being read
		inKey  = true
		line   = 1
	)
	innermost := func() byte {
		if depth == 0 {
			return 0
		}
		return stack[depth-1]
	}
	tooDeep := func() *ConfigError {
		return &ConfigError{Key: "(file)", Reason: fmt.Sprintf("line %d: nested more than %d levels deep (tables, arrays, inline tables and dotted keys each count one); flatten it", line, maxConfigNesting)}
	}
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch c {
		case '\n':
			line++
			keyDot = 0
			// A new line at the top level starts a key (or a table
			// header); inside an array or inline table it continues a value.
			inKey = depth == 0
		case '#':
			for i < len(data) && data[i] != '\n' {
				i++
			}
			i-- // the newline is handled above
		case '"', '\'':
			end, nl := skipTOMLString(data, i)
			line += nl
			i = end
		case '=':
			inKey, keyDot = false, 0
		case '.':
			if inKey {
				keyDot++
				if depth+keyDot > maxConfigNesting {
					return tooDeep()
				}
			}
		case ',':
			keyDot = 0
			inKey = innermost() == '{'
		case '[', '{':
			if depth+keyDot >= maxConfigNesting {
				return tooDeep()
			}
			stack[depth] = c
			depth++
			keyDot = 0
			// A table header's name is a key; so is what follows '{'.
			inKey = c == '{' || (c == '[' && inKey && (depth == 1 || (depth == 2 && stack[0] == '[')))
		case ']', '}':
			if depth > 0 {
				depth--
			}
			// What follows a closed container is a value's end or a
			// header's: no key until a comma or a new line.
			keyDot = 0
			inKey = false
		}
	}
	return nil
}

// skipTOMLString returns the index of the last byte of the string starting
// at data[i] (a basic, literal or multi-line string) and the newlines it
// holds. An unterminated string runs to the end: the parser reports it.
func skipTOMLString(data []byte, i int) (end, newlines int) {
	q := data[i]
	multi := i+2 < len(data) && data[i+1] == q && data[i+2] == q
	j := i + 1
	if multi {
		j = i + 3
	}
	for ; j < len(data); j++ {
		switch data[j] {
		case '\\':
			if q == '"' {
				if j+1 < len(data) && data[j+1] == '\n' {
					newlines++
				}
				j++
			}
		case '\n':
			newlines++
			if !multi {
				return j - 1, newlines - 1 // the newline ends the line, not the string
			}
		case q:
			if !multi {
				return j, newlines
			}
			if j+2 < len(data) && data[j+1] == q && data[j+2] == q {
				// Up to two more quotes may close a multi-line string.
				j += 2
				for k := 0; k < 2 && j+1 < len(data) && data[j+1] == q; k++ {
					j++
				}
				return j, newlines
			}
		}
	}
	return len(data) - 1, newlines
}
