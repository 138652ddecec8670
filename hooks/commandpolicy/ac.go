package commandpolicy

// acMachine is an Aho-Corasick automaton over ASCII-case-folded bytes,
// compiled to a dense transition table so a scan costs one table lookup per
// input byte whatever the number of literals.
type acMachine struct {
	class  [256]uint8 // input byte -> column; 0 is "byte in no literal"
	ncols  int
	next   []int32   // state*ncols + column -> state
	out    [][]int32 // state -> literal ids that end here (via failure links too)
	lenOf  []int     // literal id -> length in bytes
	hasOut []bool
}

func foldByte(b byte) byte {
	if b >= 'A' && b <= 'Z' {
		return b + ('a' - 'A')
	}
	return b
}

// newACMachine builds the automaton; literal i reports id i.
func newACMachine(literals []string) *acMachine {
	m := &acMachine{ncols: 1}
	for _, lit := range literals {
		for i := 0; i < len(lit); i++ {
			b := foldByte(lit[i])
			if m.class[b] == 0 {
				m.class[b] = uint8(m.ncols)
				m.ncols++
			}
		}
	}
	// Upper-case letters share the column of their lower-case form.
	for b := 'A'; b <= 'Z'; b++ {
		m.class[b] = m.class[b+('a'-'A')]
	}
	// Build the trie; -1 marks a missing edge until failure links fill it.
	newState := func() int32 {
		for i := 0; i < m.ncols; i++ {
			m.next = append(m.next, -1)
		}
		m.out = append(m.out, nil)
		return int32(len(m.out) - 1)
	}
	newState()
	m.lenOf = make([]int, len(literals))
	for id, lit := range literals {
		m.lenOf[id] = len(lit)
		s := int32(0)
		for i := 0; i < len(lit); i++ {
			c := int(m.class[foldByte(lit[i])])
			if m.next[int(s)*m.ncols+c] < 0 {
				ns := newState()
				m.next[int(s)*m.ncols+c] = ns
			}
			s = m.next[int(s)*m.ncols+c]
		}
		m.out[s] = append(m.out[s], int32(id))
	}
	// Breadth-first: resolve every missing edge through the failure link so
	// the scan never follows failure links itself.
	fail := make([]int32, len(m.out))
	queue := make([]int32, 0, len(m.out))
	for c := 0; c < m.ncols; c++ {
		t := m.next[c]
		if t < 0 {
			m.next[c] = 0
			continue
		}
		fail[t] = 0
		queue = append(queue, t)
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		m.out[s] = append(m.out[s], m.out[fail[s]]...)
		for c := 0; c < m.ncols; c++ {
			t := m.next[int(s)*m.ncols+c]
			f := m.next[int(fail[s])*m.ncols+c]
			if t < 0 {
				m.next[int(s)*m.ncols+c] = f
				continue
			}
			fail[t] = f
			queue = append(queue, t)
		}
	}
	m.hasOut = make([]bool, len(m.out))
	for s := range m.out {
		m.hasOut[s] = len(m.out[s]) > 0
	}
	return m
}
