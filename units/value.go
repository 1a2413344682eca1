package units

import "time"

// Size is a number of octets usable as a flag.Value and in text-based configuration files
// (encoding.TextMarshaler and TextUnmarshaler), written as FormatSize writes it.
type Size int64

func (s Size) String() string { return FormatSize(int64(s)) }

// Set parses v with ParseSize.
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *Size) UnmarshalText(b []byte) error { return s.Set(string(b)) }

// Rate is a rate in bits per second usable as a flag.Value and in configuration files, written
// as FormatRate writes it.
type Rate int64

func (r Rate) String() string { return FormatRate(int64(r)) }

// Set parses v with ParseRate.
func (r *Rate) Set(v string) error {
	n, err := ParseRate(v)
	if err != nil {
		return err
	}
	*r = Rate(n)
	return nil
}

func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r *Rate) UnmarshalText(b []byte) error { return r.Set(string(b)) }

// Fraction is a number in [0, 1] usable as a flag.Value and in configuration files.
type Fraction float64

func (f Fraction) String() string { return FormatFraction(float64(f)) }

// Set parses v with ParseFraction.
func (f *Fraction) Set(v string) error {
	x, err := ParseFraction(v)
	if err != nil {
		return err
	}
	*f = Fraction(x)
	return nil
}

func (f Fraction) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

func (f *Fraction) UnmarshalText(b []byte) error { return f.Set(string(b)) }

// Sizes is a comma-separated list of sizes usable as a flag.Value; Set replaces the whole list.
type Sizes []int64

func (l Sizes) String() string { return join(l, FormatSize) }

func (l *Sizes) Set(v string) error { return setList(l, v, ParseSize) }

// Rates is a comma-separated list of rates usable as a flag.Value; Set replaces the whole list.
type Rates []int64

func (l Rates) String() string { return join(l, FormatRate) }

func (l *Rates) Set(v string) error { return setList(l, v, ParseRate) }

// Fractions is a comma-separated list of fractions usable as a flag.Value; Set replaces the
// whole list.
type Fractions []float64

func (l Fractions) String() string { return join(l, FormatFraction) }

func (l *Fractions) Set(v string) error { return setList(l, v, ParseFraction) }

// Durations is a comma-separated list of durations usable as a flag.Value; Set replaces the
// whole list.
type Durations []time.Duration

func (l Durations) String() string { return join(l, time.Duration.String) }

func (l *Durations) Set(v string) error { return setList(l, v, ParseDuration) }

func join[T any](l []T, format func(T) string) string {
	b := make([]byte, 0, 8*len(l))
	for i, v := range l {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, format(v)...)
	}
	return string(b)
}

func setList[L ~[]T, T any](l *L, v string, parse func(string) (T, error)) error {
	xs, err := ParseList(v, parse)
	if err != nil {
		return err
	}
	*l = xs
	return nil
}
