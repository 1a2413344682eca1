package conform

func crfMoreScenarios() []Scenario { return nil }
