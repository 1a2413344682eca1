package conform

func csfMoreScenarios() []Scenario { return nil }
